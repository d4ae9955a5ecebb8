//! Expression-backed values of a Stage (`weight`/`weightFrom`, `delay.durationFrom`,
//! `delay.jitterDurationFrom`) and KWOK's rules built on them: the delay with its jitter, and
//! the weighted choice among the Stages that match an object.
//!
//! Each rule follows KWOK's `pkg/utils/lifecycle` (`value_int_from.go`,
//! `value_duration_from.go`, `lifecycle.go`), with Go's parsing of integers, durations and
//! RFC 3339 times from [`crate::go`].

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};

use chrono::{DateTime, TimeDelta, Utc};
use serde_json::Value;
use tracing::debug;

use super::FieldError;
use super::expr::{Cel, CelObject, Expression, Jq};
use super::v1alpha1::{ExpressionFrom, StageDelay};
use crate::go::{parse_go_duration, parse_go_int, parse_go_time};
use crate::rng::Rng;

const NANOS_PER_MILLI: i64 = 1_000_000;

/// The first output of `jq` for `obj`; a runtime error gives none (KWOK drops every output
/// of a failed run).
fn first_output<'a>(jq: &Jq, obj: &'a Value) -> Option<Cow<'a, Value>> {
    match jq.outputs(obj) {
        Ok(outputs) => outputs.into_iter().next(),
        Err(error) => {
            debug!(expression = jq.source(), %error, "jq expression failed");
            None
        }
    }
}

/// The result of `cel` for `obj`; an evaluation error gives none.
fn eval_cel(cel: &Cel, obj: &Value) -> Option<cel::Value> {
    match cel.eval_object(&CelObject::new(obj)) {
        Ok(value) => Some(value),
        Err(error) => {
            debug!(expression = cel.source(), %error, "cel expression failed");
            None
        }
    }
}

/// An integer with an optional expression overriding it (`weight` + `weightFrom`).
#[derive(Debug)]
pub struct IntFrom {
    value: i64,
    from: Option<Expression>,
    /// Whether [`IntFrom::unusable`] has said so already.
    said: AtomicBool,
}

impl IntFrom {
    /// `value`, overridden by `from` when given; errors point into `path` (e.g.
    /// `spec.weightFrom`).
    pub fn compile(
        value: i64,
        from: Option<&ExpressionFrom>,
        path: &str,
    ) -> Result<Self, FieldError> {
        let from = from.map(|f| Expression::compile(f, path)).transpose()?;
        Ok(Self {
            value,
            from,
            said: AtomicBool::new(false),
        })
    }

    /// Say, once for this compiled value, that it gave nothing usable for `object` and
    /// that Stage `stage` is left out of the choice because of it (as KWOK leaves it out,
    /// silently).
    pub fn unusable(&self, stage: &str, object: &Value) {
        if !self.said.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                stage,
                object = %describe(object),
                "Stage {stage}: spec.weightFrom gave no usable weight for {} (an empty string, a number that does not fit a 64-bit integer, or a failed expression): the Stage is left out of the choice among the Stages that match, as KWOK does (said once per Stage)",
                describe(object),
            );
        }
    }

    /// The value for `obj`; `None` means "failed" (KWOK's `ok == false` or error).
    ///
    /// jq: no output (or a runtime error) gives the static value; a first output that is a
    /// number gives it truncated; a string gives `None` when empty, else its Go
    /// `ParseInt(s, 0, 0)` value (`"0x10"`, `"1_000"`), `None` when it does not parse; any
    /// other output (null, bool, ...) gives the static value. CEL: `int`, `uint`, `double`
    /// (truncated), `bool` (1/0) or `duration` (nanoseconds); anything else, or an error,
    /// gives `None`.
    pub fn get(&self, obj: &Value) -> Option<i64> {
        match &self.from {
            None => Some(self.value),
            Some(Expression::Cel(cel)) => eval_cel(cel, obj).and_then(|v| cel_int(&v)),
            Some(Expression::Jq(jq)) => match first_output(jq, obj).as_deref() {
                None => Some(self.value),
                Some(Value::String(s)) if s.is_empty() => None,
                Some(Value::String(s)) => parse_go_int(s),
                Some(Value::Number(n)) => Some(number_to_int(n)),
                Some(_) => Some(self.value),
            },
        }
    }
}

/// `KIND NAMESPACE/NAME` of an object, for a log line.
fn describe(object: &Value) -> String {
    let field = |path: &str| object.pointer(path).and_then(Value::as_str).unwrap_or("");
    let namespace = field("/metadata/namespace");
    let name = field("/metadata/name");
    let kind = field("/kind");
    if namespace.is_empty() {
        format!("{kind} {name}")
    } else {
        format!("{kind} {namespace}/{name}")
    }
}

/// Truncates a JSON number to an integer (saturating, as Rust casts do).
fn number_to_int(n: &serde_json::Number) -> i64 {
    match (n.as_i64(), n.as_u64()) {
        (Some(i), _) => i,
        (None, Some(_)) => i64::MAX,
        (None, None) => n.as_f64().map_or(0, |f| f as i64),
    }
}

fn cel_int(v: &cel::Value) -> Option<i64> {
    match v {
        cel::Value::Int(i) => Some(*i),
        // Go's int64(uint64) wraps, as `as` does.
        cel::Value::UInt(u) => Some(*u as i64),
        cel::Value::Float(f) => Some(*f as i64),
        cel::Value::Bool(b) => Some(i64::from(*b)),
        cel::Value::Duration(d) => Some(delta_nanos(*d)),
        other => {
            debug!(result = ?other.type_of(), "cel result is not an integer");
            None
        }
    }
}

/// A duration with an optional expression overriding it (`durationMilliseconds` +
/// `durationFrom`).
#[derive(Debug)]
pub struct DurationFrom {
    /// Nanoseconds.
    value: Option<i64>,
    from: Option<Expression>,
}

impl DurationFrom {
    /// `value_ms` milliseconds, overridden by `from` when given; `None` when neither is
    /// given. Errors point into `path` (e.g. `spec.delay.durationFrom`).
    pub fn compile(
        value_ms: Option<i64>,
        from: Option<&ExpressionFrom>,
        path: &str,
    ) -> Result<Option<Self>, FieldError> {
        if value_ms.is_none() && from.is_none() {
            return Ok(None);
        }
        let from = from.map(|f| Expression::compile(f, path)).transpose()?;
        Ok(Some(Self {
            value: value_ms.map(|ms| ms.saturating_mul(NANOS_PER_MILLI)),
            from,
        }))
    }

    /// The duration for `obj` at `now`; `None` means "no value".
    ///
    /// jq: no output (or a runtime error) gives the static value; a first output `""` gives
    /// `None`; an RFC 3339 time gives that time minus `now` (negative when past); a Go
    /// duration (`"1m30s"`, `"-5s"`, `"100ms"`) gives that duration; anything else (numbers
    /// included) gives the static value. CEL: a `duration`; a `string` parsed as a Go
    /// duration; `int`, `uint` or `double` nanoseconds; a `timestamp` minus `now` (kstage
    /// only: KWOK rejects timestamps); anything else, or an error, gives `None`.
    pub fn get(&self, obj: &Value, now: DateTime<Utc>) -> Option<TimeDelta> {
        self.nanos(obj, now).map(TimeDelta::nanoseconds)
    }

    fn nanos(&self, obj: &Value, now: DateTime<Utc>) -> Option<i64> {
        match &self.from {
            None => self.value,
            Some(Expression::Cel(cel)) => eval_cel(cel, obj).and_then(|v| cel_nanos(&v, now)),
            Some(Expression::Jq(jq)) => match first_output(jq, obj).as_deref() {
                None => self.value,
                Some(Value::String(s)) if s.is_empty() => None,
                Some(Value::String(s)) => parse_go_time(s)
                    .map(|t| nanos_between(now, t))
                    .or_else(|| parse_go_duration(s))
                    .or(self.value),
                Some(_) => self.value,
            },
        }
    }
}

fn cel_nanos(v: &cel::Value, now: DateTime<Utc>) -> Option<i64> {
    match v {
        cel::Value::Duration(d) => Some(delta_nanos(*d)),
        cel::Value::String(s) => parse_go_duration(s),
        cel::Value::Int(i) => Some(*i),
        cel::Value::UInt(u) => Some(*u as i64),
        cel::Value::Float(f) => Some(*f as i64),
        cel::Value::Timestamp(t) => Some(nanos_between(now, t.with_timezone(&Utc))),
        other => {
            debug!(result = ?other.type_of(), "cel result is not a duration");
            None
        }
    }
}

/// `to - from` in nanoseconds, saturating like Go's `Time.Sub`.
fn nanos_between(from: DateTime<Utc>, to: DateTime<Utc>) -> i64 {
    delta_nanos(to.signed_duration_since(from))
}

fn delta_nanos(d: TimeDelta) -> i64 {
    d.num_nanoseconds().unwrap_or(if d < TimeDelta::zero() {
        i64::MIN
    } else {
        i64::MAX
    })
}

/// The delay of a Stage: a base duration and an optional jitter bound.
#[derive(Debug)]
pub struct Delay {
    base: DurationFrom,
    jitter: Option<DurationFrom>,
    /// Whether [`Delay::unusable`] has said so already.
    said: AtomicBool,
}

/// The delays a Stage may wait: `min` exactly, or uniformly in `[min, max)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DelayRange {
    /// The base delay (may be negative: due already).
    pub min: TimeDelta,
    /// The jitter bound, when larger than `min`.
    pub max: Option<TimeDelta>,
}

impl Delay {
    /// `None` when the Stage has no `delay`. As in KWOK, a `delay` without
    /// `durationMilliseconds` has a base of 0 (which `durationFrom` may override); the
    /// jitter exists when `jitterDurationMilliseconds` or `jitterDurationFrom` is given.
    /// Errors point at `path.durationFrom` / `path.jitterDurationFrom`.
    pub fn compile(
        spec: Option<&StageDelay>,
        path: &str,
    ) -> Result<Option<Delay>, Vec<FieldError>> {
        let Some(spec) = spec else {
            return Ok(None);
        };
        let base = DurationFrom::compile(
            Some(spec.duration_milliseconds.unwrap_or(0)),
            spec.duration_from.as_ref(),
            &format!("{path}.durationFrom"),
        );
        let jitter = DurationFrom::compile(
            spec.jitter_duration_milliseconds,
            spec.jitter_duration_from.as_ref(),
            &format!("{path}.jitterDurationFrom"),
        );
        match (base, jitter) {
            (Ok(Some(base)), Ok(jitter)) => Ok(Some(Delay {
                base,
                jitter,
                said: AtomicBool::new(false),
            })),
            // The base always has a value, so `Ok(None)` cannot happen.
            (Ok(None), Ok(_)) => Ok(None),
            (base, jitter) => Err(base.err().into_iter().chain(jitter.err()).collect()),
        }
    }

    /// Say, once for this compiled delay, that it gave nothing usable for `object` and
    /// that Stage `stage` plays without delay because of it (as in KWOK).
    pub fn unusable(&self, stage: &str, object: &Value) {
        if !self.said.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                stage,
                object = %describe(object),
                "Stage {stage}: spec.delay.durationFrom gave no usable duration for {} (an empty string, or a failed expression): the Stage plays without delay, as KWOK does (said once per Stage)",
                describe(object),
            );
        }
    }

    /// KWOK's `DelayRangePossible`: `None` when the base has no value (no delay);
    /// `[base]` when there is no jitter or it has no value; `[jitter]` when
    /// `jitter <= base`; else `[base, jitter]`.
    pub fn range(&self, obj: &Value, now: DateTime<Utc>) -> Option<DelayRange> {
        let (base, jitter) = self.bounds(obj, now)?;
        Some(DelayRange {
            min: TimeDelta::nanoseconds(base),
            max: jitter.map(TimeDelta::nanoseconds),
        })
    }

    /// KWOK's `Delay`: the base, or the jitter when `jitter <= base`, else uniform in
    /// `[base, jitter)`. A negative delay means "now"; the caller clamps it.
    pub fn sample(&self, obj: &Value, now: DateTime<Utc>, rng: &mut Rng) -> Option<TimeDelta> {
        let (base, jitter) = self.bounds(obj, now)?;
        let Some(jitter) = jitter else {
            return Some(TimeDelta::nanoseconds(base));
        };
        let span = u64::try_from(i128::from(jitter) - i128::from(base)).unwrap_or(u64::MAX);
        let picked = i128::from(base) + i128::from(rng.below(span));
        Some(TimeDelta::nanoseconds(
            i64::try_from(picked).unwrap_or(jitter),
        ))
    }

    /// `(min, Some(max))` for a range, `(d, None)` for a fixed delay, in nanoseconds.
    fn bounds(&self, obj: &Value, now: DateTime<Utc>) -> Option<(i64, Option<i64>)> {
        let base = self.base.nanos(obj, now)?;
        let jitter = self.jitter.as_ref().and_then(|j| j.nanos(obj, now));
        Some(match jitter {
            None => (base, None),
            Some(jitter) if jitter <= base => (jitter, None),
            Some(jitter) => (base, Some(jitter)),
        })
    }
}

/// Which candidates KWOK can pick, given their weights.
enum Pool {
    /// Every candidate, uniformly.
    All,
    /// Those whose weight is known and not negative, uniformly.
    NonNegative,
    /// Those with a positive weight, by weight; `total` is KWOK's sum of all known weights.
    Weighted { total: i128 },
}

fn pool(weights: &[Option<i64>]) -> Pool {
    let failed = weights.iter().filter(|w| w.is_none()).count();
    if weights.len() <= 1 || failed == weights.len() {
        return Pool::All;
    }
    let total: i128 = weights.iter().flatten().map(|w| i128::from(*w)).sum();
    match (total, failed) {
        (0, 0) => Pool::All,
        (0, _) => Pool::NonNegative,
        (total, _) => Pool::Weighted { total },
    }
}

fn members(weights: &[Option<i64>], keep: impl Fn(i64) -> bool) -> Vec<usize> {
    weights
        .iter()
        .enumerate()
        .filter(|(_, w)| w.is_some_and(&keep))
        .map(|(i, _)| i)
        .collect()
}

/// KWOK's `ListAllPossible` filter over the matched Stages' weights (`None` = its
/// `weightFrom` failed): one candidate, or all failed -> all; total weight 0 -> all when none
/// failed, else those not failed (and not negative); else those with a positive weight.
pub fn possible(weights: &[Option<i64>]) -> Vec<usize> {
    match pool(weights) {
        Pool::All => (0..weights.len()).collect(),
        Pool::NonNegative => members(weights, |w| w >= 0),
        Pool::Weighted { .. } => members(weights, |w| w > 0),
    }
}

/// KWOK's weighted choice among the matched Stages (see [`possible`] for who can win):
/// uniform in the first two cases, else by positive weight. Returns the index, `None` when
/// there is no candidate or none is possible (negative weights only: KWOK panics there).
pub fn choose_weighted(weights: &[Option<i64>], rng: &mut Rng) -> Option<usize> {
    let uniform = |pool: Vec<usize>, rng: &mut Rng| {
        let len = u64::try_from(pool.len()).unwrap_or(u64::MAX);
        usize::try_from(rng.below(len))
            .ok()
            .and_then(|i| pool.get(i).copied())
    };
    match pool(weights) {
        Pool::All if weights.len() == 1 => Some(0),
        Pool::All => uniform((0..weights.len()).collect(), rng),
        Pool::NonNegative => uniform(members(weights, |w| w >= 0), rng),
        Pool::Weighted { total } => {
            let positive: Vec<(usize, i128)> = weights
                .iter()
                .enumerate()
                .filter_map(|(i, w)| w.filter(|w| *w > 0).map(|w| (i, i128::from(w))))
                .collect();
            // KWOK draws below its total, negative weights included; where that total is
            // negative (KWOK panics) the positive weights alone count.
            let total = if total > 0 {
                total
            } else {
                positive.iter().map(|(_, w)| w).sum()
            };
            let mut off = i128::from(rng.below(u64::try_from(total).unwrap_or(u64::MAX)));
            for (i, w) in &positive {
                off -= w;
                if off < 0 {
                    return Some(*i);
                }
            }
            positive.last().map(|(i, _)| *i)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stage::v1alpha1::{ExpressionCel, ExpressionJq};
    use serde_json::json;

    fn now() -> DateTime<Utc> {
        parse_go_time("2006-01-02T15:04:05Z").unwrap_or_default()
    }

    fn legacy(src: &str) -> ExpressionFrom {
        ExpressionFrom {
            expression_from: Some(src.to_owned()),
            ..ExpressionFrom::default()
        }
    }

    fn cel(src: &str) -> ExpressionFrom {
        ExpressionFrom {
            cel: Some(ExpressionCel {
                expression: src.to_owned(),
            }),
            ..ExpressionFrom::default()
        }
    }

    fn annotated(key: &str, value: &str) -> Value {
        json!({"metadata": {"annotations": {key: value}}})
    }

    fn int_from(value: i64, from: &ExpressionFrom) -> IntFrom {
        match IntFrom::compile(value, Some(from), "spec.weightFrom") {
            Ok(v) => v,
            Err(e) => panic!("{e}"),
        }
    }

    fn duration_from(value_ms: Option<i64>, from: Option<&ExpressionFrom>) -> DurationFrom {
        match DurationFrom::compile(value_ms, from, "spec.delay.durationFrom") {
            Ok(Some(v)) => v,
            other => panic!("{other:?}"),
        }
    }

    fn ms(n: i64) -> TimeDelta {
        TimeDelta::milliseconds(n)
    }

    #[test]
    fn values_are_send_sync() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<IntFrom>();
        send_sync::<DurationFrom>();
        send_sync::<Delay>();
    }

    #[test]
    fn int_from_follows_kwok() {
        let weight = int_from(7, &legacy(".metadata.annotations[\"w\"]"));
        assert_eq!(weight.get(&json!({})), Some(7), "null output -> static");
        assert_eq!(weight.get(&annotated("w", "3")), Some(3));
        assert_eq!(weight.get(&annotated("w", "-3")), Some(-3));
        assert_eq!(weight.get(&annotated("w", "0x10")), Some(16));
        assert_eq!(weight.get(&annotated("w", "1_000")), Some(1000));
        assert_eq!(weight.get(&annotated("w", "")), None, "empty string fails");
        assert_eq!(weight.get(&annotated("w", "abc")), None, "bad string fails");
        assert_eq!(weight.get(&annotated("w", "1.5")), None);
        let number = int_from(7, &legacy(".spec.n"));
        assert_eq!(number.get(&json!({"spec": {"n": 5}})), Some(5));
        assert_eq!(number.get(&json!({"spec": {"n": 5.9}})), Some(5));
        assert_eq!(number.get(&json!({"spec": {"n": true}})), Some(7));
        assert_eq!(
            number.get(&json!({"spec": "x"})),
            Some(7),
            "runtime error -> static"
        );
        let none = int_from(7, &legacy("empty"));
        assert_eq!(none.get(&json!({})), Some(7));
        let fixed = IntFrom::compile(4, None, "spec.weightFrom").map(|w| w.get(&json!({})));
        assert_eq!(fixed, Ok(Some(4)));
        // KWOK's own cases
        let generation = int_from(0, &legacy(".metadata.generation"));
        assert_eq!(
            generation.get(&json!({"metadata": {"generation": 1}})),
            Some(1)
        );
        let grace = int_from(0, &cel("self.spec.terminationGracePeriodSeconds"));
        assert_eq!(
            grace.get(&json!({"spec": {"terminationGracePeriodSeconds": 1}})),
            Some(1)
        );
        assert_eq!(grace.get(&json!({"spec": {}})), None, "cel error fails");
        let kinds = int_from(0, &cel("self.x"));
        assert_eq!(kinds.get(&json!({"x": 2.7})), Some(2));
        assert_eq!(kinds.get(&json!({"x": true})), Some(1));
        assert_eq!(kinds.get(&json!({"x": "5"})), None);
        assert_eq!(
            int_from(0, &cel("duration('2s')")).get(&json!({})),
            Some(2_000_000_000)
        );
    }

    #[test]
    fn int_from_reports_bad_expressions() {
        let err = IntFrom::compile(1, Some(&legacy(".a[")), "spec.weightFrom").err();
        assert_eq!(
            err.map(|e| e.path),
            Some("spec.weightFrom.expressionFrom".to_owned())
        );
    }

    #[test]
    fn duration_from_follows_kwok() {
        let now = now();
        let delay = duration_from(Some(1000), Some(&legacy(".metadata.annotations[\"d\"]")));
        assert_eq!(delay.get(&json!({}), now), Some(ms(1000)), "null -> static");
        assert_eq!(delay.get(&annotated("d", "5s"), now), Some(ms(5000)));
        assert_eq!(delay.get(&annotated("d", "1m30s"), now), Some(ms(90_000)));
        assert_eq!(delay.get(&annotated("d", "100ms"), now), Some(ms(100)));
        assert_eq!(delay.get(&annotated("d", "-2s"), now), Some(ms(-2000)));
        assert_eq!(delay.get(&annotated("d", ""), now), None);
        assert_eq!(
            delay.get(&annotated("d", "soon"), now),
            Some(ms(1000)),
            "unparsable -> static"
        );
        assert_eq!(
            delay.get(&annotated("d", "2006-01-02T15:04:10Z"), now),
            Some(ms(5000))
        );
        assert_eq!(
            delay.get(&annotated("d", "2006-01-02T15:04:04.5Z"), now),
            Some(ms(-500)),
            "past -> negative"
        );
        assert_eq!(
            delay.get(&annotated("d", "2006-01-02T16:04:05+01:00"), now),
            Some(ms(0))
        );
        let number = duration_from(Some(1000), Some(&legacy(".n")));
        assert_eq!(
            number.get(&json!({"n": 5}), now),
            Some(ms(1000)),
            "numbers -> static"
        );
        let no_static = duration_from(None, Some(&legacy(".n")));
        assert_eq!(no_static.get(&json!({}), now), None);
        assert_eq!(no_static.get(&json!({"n": "1s"}), now), Some(ms(1000)));
        // KWOK's own case: deletionTimestamp one second ahead
        let deletion = duration_from(Some(0), Some(&legacy(".metadata.deletionTimestamp")));
        let obj = json!({"metadata": {"deletionTimestamp": "2006-01-02T15:04:06Z"}});
        assert_eq!(deletion.get(&obj, now), Some(ms(1000)));
        assert!(matches!(DurationFrom::compile(None, None, "p"), Ok(None)));
        let fixed = duration_from(Some(3), None);
        assert_eq!(fixed.get(&json!({}), now), Some(ms(3)));
    }

    #[test]
    fn duration_from_cel() {
        let now = now();
        let obj = json!({"metadata": {"annotations": {"custom-duration": "7s"}}, "spec": {"duration": "7s", "n": 5}});
        let get = |src: &str| duration_from(None, Some(&cel(src))).get(&obj, now);
        assert_eq!(
            get("duration(self.metadata.annotations[\"custom-duration\"])"),
            Some(ms(7000))
        );
        assert_eq!(get("self.spec.duration"), Some(ms(7000)));
        assert_eq!(get("self.spec.n"), Some(TimeDelta::nanoseconds(5)));
        assert_eq!(get("timestamp('2006-01-02T15:04:07Z')"), Some(ms(2000)));
        assert_eq!(get("self.nope"), None);
        assert_eq!(get("'soon'"), None);
        assert_eq!(get("true"), None);
    }

    fn delay(spec: StageDelay) -> Delay {
        match Delay::compile(Some(&spec), "spec.delay") {
            Ok(Some(d)) => d,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn delay_range_follows_kwok() {
        let now = now();
        let obj = json!({});
        assert!(matches!(Delay::compile(None, "spec.delay"), Ok(None)));
        let fixed = delay(StageDelay {
            duration_milliseconds: Some(1000),
            ..StageDelay::default()
        });
        assert_eq!(
            fixed.range(&obj, now),
            Some(DelayRange {
                min: ms(1000),
                max: None
            })
        );
        let jittered = delay(StageDelay {
            duration_milliseconds: Some(1000),
            jitter_duration_milliseconds: Some(5000),
            ..StageDelay::default()
        });
        assert_eq!(
            jittered.range(&obj, now),
            Some(DelayRange {
                min: ms(1000),
                max: Some(ms(5000))
            })
        );
        let smaller_jitter = delay(StageDelay {
            duration_milliseconds: Some(5000),
            jitter_duration_milliseconds: Some(1000),
            ..StageDelay::default()
        });
        assert_eq!(
            smaller_jitter.range(&obj, now),
            Some(DelayRange {
                min: ms(1000),
                max: None
            })
        );
        let jitter_only = delay(StageDelay {
            jitter_duration_milliseconds: Some(2000),
            ..StageDelay::default()
        });
        assert_eq!(
            jitter_only.range(&obj, now),
            Some(DelayRange {
                min: ms(0),
                max: Some(ms(2000))
            }),
            "KWOK: base 0 when only the jitter is given"
        );
        let empty_base = delay(StageDelay {
            duration_milliseconds: Some(1000),
            duration_from: Some(legacy(".metadata.annotations[\"d\"]")),
            jitter_duration_milliseconds: Some(5000),
            ..StageDelay::default()
        });
        assert_eq!(
            empty_base.range(&annotated("d", ""), now),
            None,
            "no base, no delay"
        );
        assert_eq!(
            empty_base.range(&annotated("d", "2s"), now).map(|r| r.min),
            Some(ms(2000))
        );
        let empty_jitter = delay(StageDelay {
            duration_milliseconds: Some(1000),
            jitter_duration_from: Some(legacy(".metadata.annotations[\"j\"]")),
            ..StageDelay::default()
        });
        assert_eq!(
            empty_jitter.range(&annotated("j", ""), now),
            Some(DelayRange {
                min: ms(1000),
                max: None
            })
        );
    }

    /// pod/general `pod-delete`: jitter from a deletionTimestamp equal to now gives `[0]`
    /// (golden output), and one in the past a negative delay.
    #[test]
    fn pod_delete_delay_matches_golden_output() {
        let now = now();
        let d = delay(StageDelay {
            duration_milliseconds: Some(1000),
            duration_from: Some(legacy(
                ".metadata.annotations[\"pod-delete.stage.kwok.x-k8s.io/delay\"]",
            )),
            jitter_duration_from: Some(legacy(".metadata.deletionTimestamp")),
            ..StageDelay::default()
        });
        let pod = json!({"metadata": {"deletionTimestamp": "2006-01-02T15:04:05Z"}});
        assert_eq!(
            d.range(&pod, now),
            Some(DelayRange {
                min: ms(0),
                max: None
            })
        );
        let past = json!({"metadata": {"deletionTimestamp": "2006-01-02T15:04:00Z"}});
        assert_eq!(
            d.range(&past, now),
            Some(DelayRange {
                min: ms(-5000),
                max: None
            })
        );
        let mut rng = Rng::seeded(1);
        assert_eq!(d.sample(&past, now, &mut rng), Some(ms(-5000)));
        let later = json!({"metadata": {"deletionTimestamp": "2006-01-02T15:04:35Z"}});
        assert_eq!(
            d.range(&later, now),
            Some(DelayRange {
                min: ms(1000),
                max: Some(ms(30_000))
            })
        );
    }

    #[test]
    fn delay_sample_is_uniform_in_range() {
        let now = now();
        let d = delay(StageDelay {
            duration_milliseconds: Some(1000),
            jitter_duration_milliseconds: Some(5000),
            ..StageDelay::default()
        });
        let mut rng = Rng::seeded(42);
        let mut buckets = [0u32; 4];
        for _ in 0..10_000 {
            let Some(v) = d.sample(&json!({}), now, &mut rng) else {
                panic!("no delay");
            };
            assert!(v >= ms(1000) && v < ms(5000), "{v}");
            let bucket = usize::try_from((v - ms(1000)).num_milliseconds() / 1000).unwrap_or(0);
            buckets[bucket] += 1;
        }
        for b in buckets {
            assert!((2300..2700).contains(&b), "{buckets:?}");
        }
        let fixed = delay(StageDelay {
            duration_milliseconds: Some(5000),
            jitter_duration_milliseconds: Some(5000),
            ..StageDelay::default()
        });
        assert_eq!(fixed.sample(&json!({}), now, &mut rng), Some(ms(5000)));
    }

    #[test]
    fn delay_reports_every_bad_expression() {
        let spec = StageDelay {
            duration_from: Some(legacy(".a[")),
            jitter_duration_from: Some(ExpressionFrom {
                jq: Some(ExpressionJq {
                    expression: "1 +".to_owned(),
                }),
                ..ExpressionFrom::default()
            }),
            ..StageDelay::default()
        };
        let paths: Vec<String> = Delay::compile(Some(&spec), "spec.delay")
            .err()
            .unwrap_or_default()
            .into_iter()
            .map(|e| e.path)
            .collect();
        assert_eq!(
            paths,
            [
                "spec.delay.durationFrom.expressionFrom",
                "spec.delay.jitterDurationFrom.jq.expression"
            ]
        );
    }

    #[test]
    fn possible_follows_list_all_possible() {
        assert!(possible(&[]).is_empty());
        assert_eq!(possible(&[Some(0)]), [0]);
        assert_eq!(possible(&[None]), [0]);
        assert_eq!(possible(&[None, None]), [0, 1]);
        assert_eq!(possible(&[Some(0), Some(0)]), [0, 1]);
        assert_eq!(possible(&[Some(0), None, Some(0)]), [0, 2]);
        assert_eq!(possible(&[Some(1), Some(0), None, Some(3)]), [0, 3]);
        assert_eq!(possible(&[Some(5), Some(-5), None]), [0]);
        assert_eq!(possible(&[Some(-5), None]), Vec::<usize>::new());
    }

    #[test]
    fn choose_weighted_edge_cases() {
        let mut rng = Rng::seeded(3);
        assert_eq!(choose_weighted(&[], &mut rng), None);
        assert_eq!(choose_weighted(&[None], &mut rng), Some(0));
        assert_eq!(choose_weighted(&[Some(0)], &mut rng), Some(0));
        assert_eq!(choose_weighted(&[Some(-5), None], &mut rng), None);
        for _ in 0..100 {
            assert_eq!(
                choose_weighted(&[Some(0), Some(9), None], &mut rng),
                Some(1)
            );
            let pick = choose_weighted(&[Some(0), None, Some(0)], &mut rng);
            assert!(matches!(pick, Some(0 | 2)), "{pick:?}");
            assert_eq!(choose_weighted(&[Some(-10), Some(3)], &mut rng), Some(1));
        }
    }

    /// Chi-square test of the draw counts against the expected shares (3 degrees of
    /// freedom: 16.27 is the 0.001 critical value).
    fn assert_distribution(weights: &[Option<i64>], expected: &[f64]) {
        let mut rng = Rng::seeded(20_060_102);
        let draws = 10_000;
        let mut counts = vec![0u32; weights.len()];
        for _ in 0..draws {
            match choose_weighted(weights, &mut rng) {
                Some(i) => counts[i] += 1,
                None => panic!("no choice"),
            }
        }
        let chi2: f64 = counts
            .iter()
            .zip(expected)
            .filter(|(_, e)| **e > 0.0)
            .map(|(c, e)| {
                let want = e * f64::from(draws);
                (f64::from(*c) - want).powi(2) / want
            })
            .sum();
        for (c, e) in counts.iter().zip(expected) {
            if *e == 0.0 {
                assert_eq!(*c, 0, "{counts:?}");
            }
        }
        assert!(chi2 < 16.27, "chi2 {chi2} counts {counts:?}");
    }

    #[test]
    fn choose_weighted_distributions() {
        assert_distribution(&[Some(1), Some(2), Some(3), Some(4)], &[0.1, 0.2, 0.3, 0.4]);
        assert_distribution(&[None, None, None, None], &[0.25; 4]);
        assert_distribution(&[Some(0), Some(0), Some(0), Some(0)], &[0.25; 4]);
        assert_distribution(
            &[Some(0), None, Some(0), Some(0)],
            &[1.0 / 3.0, 0.0, 1.0 / 3.0, 1.0 / 3.0],
        );
        assert_distribution(&[Some(1), None, Some(0), Some(1)], &[0.5, 0.0, 0.0, 0.5]);
        assert_distribution(
            &[Some(10_000), Some(1), None, Some(1)],
            &[10_000.0 / 10_002.0, 1.0 / 10_002.0, 0.0, 1.0 / 10_002.0],
        );
    }
}
