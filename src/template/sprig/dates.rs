//! sprig's date functions: `now`, `date`, `dateInZone`, `htmlDate`, `dateModify`, `ago`,
//! `duration`, `durationRound`, `toDate`, `unixEpoch`.
//!
//! A time is carried as a string in Go's `Time.String()` form (`2006-01-02 15:04:05.5
//! +0000 UTC`), which is what `{{ now }}` prints in Go (less the monotonic clock reading)
//! and what these functions read back. Like sprig, `date` and friends take anything that
//! is not a time or a Unix time in seconds as "now". `now` reads the env's clock; under
//! `--kwok-golden` it prints `<now>`, which the date functions read as the golden clock.

use chrono::{DateTime, TimeDelta, Utc};
use gotmpl::{TemplateError as GoError, Value};

use super::conv::{str_arg, string, wrong_type};
use super::golang_time::{GoTime, format, parse};
use super::{Arity::Exact, Call, Func, f};
use crate::go::{format_go_duration, parse_go_duration};

/// What `now` prints under `--kwok-golden`.
const GOLDEN_NOW: &str = "<now>";

pub(crate) const FUNCS: &[Func] = &[
    f("now", Exact(0), |c, _| {
        if c.env.golden() {
            return Ok(string(GOLDEN_NOW));
        }
        Ok(string(GoTime::utc(c.env.now_time()).to_go_string()))
    }),
    f("date", Exact(2), |c, a| {
        date_in_zone(c, str_arg(&a[0])?, &a[1], "Local")
    }),
    f("dateInZone", Exact(3), |c, a| {
        date_in_zone(c, str_arg(&a[0])?, &a[1], str_arg(&a[2])?)
    }),
    f("date_in_zone", Exact(3), |c, a| {
        date_in_zone(c, str_arg(&a[0])?, &a[1], str_arg(&a[2])?)
    }),
    f("htmlDate", Exact(1), |c, a| {
        date_in_zone(c, "2006-01-02", &a[0], "Local")
    }),
    f("htmlDateInZone", Exact(2), |c, a| {
        date_in_zone(c, "2006-01-02", &a[0], str_arg(&a[1])?)
    }),
    f("dateModify", Exact(2), |c, a| date_modify(c, a, false)),
    f("date_modify", Exact(2), |c, a| date_modify(c, a, false)),
    f("mustDateModify", Exact(2), |c, a| date_modify(c, a, true)),
    f("must_date_modify", Exact(2), |c, a| date_modify(c, a, true)),
    f("ago", Exact(1), |c, a| {
        let t = match &a[0] {
            Value::Int(secs) => unix(*secs),
            other => time_value(c, other).map_or_else(|| c.env.now_time(), |t| t.at.to_utc()),
        };
        let since = nanos(c.env.now_time() - t);
        Ok(string(format_go_duration(round_to_second(since))))
    }),
    f("duration", Exact(1), |_, a| {
        let secs = match &a[0] {
            Value::String(s) => crate::template::sprig::conv::go_atoi(s).unwrap_or(0),
            Value::Int(i) => *i,
            _ => 0,
        };
        Ok(string(format_go_duration(secs.wrapping_mul(1_000_000_000))))
    }),
    f("durationRound", Exact(1), |c, a| {
        let d = match &a[0] {
            Value::String(s) => match time_value(c, &a[0]) {
                Some(t) => nanos(c.env.now_time() - t.at.to_utc()),
                None => parse_go_duration(s).unwrap_or(0),
            },
            Value::Int(i) => *i,
            _ => 0,
        };
        Ok(string(duration_round(d)))
    }),
    f("toDate", Exact(2), |_, a| {
        let t = parse(str_arg(&a[0])?, str_arg(&a[1])?).unwrap_or_else(|_| zero_time());
        Ok(string(t.to_go_string()))
    }),
    f("mustToDate", Exact(2), |c, a| {
        let t = parse(str_arg(&a[0])?, str_arg(&a[1])?).map_err(|e| c.fail(e))?;
        Ok(string(t.to_go_string()))
    }),
    f("unixEpoch", Exact(1), |c, a| {
        let t = time_arg(c, &a[0])?;
        Ok(string(t.at.timestamp().to_string()))
    }),
];

/// Go's zero time, `0001-01-01 00:00:00 +0000 UTC`.
fn zero_time() -> GoTime {
    let at = chrono::NaiveDate::from_ymd_opt(1, 1, 1)
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .map(|n| n.and_utc())
        .unwrap_or_default();
    GoTime::utc(at)
}

fn unix(secs: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(secs, 0).unwrap_or_default()
}

fn nanos(d: TimeDelta) -> i64 {
    d.num_nanoseconds().unwrap_or(if d < TimeDelta::zero() {
        i64::MIN
    } else {
        i64::MAX
    })
}

/// A time value: Go's `Time.String()` form, or `<now>` under `--kwok-golden`.
pub(crate) fn time_value(c: &Call<'_>, v: &Value) -> Option<GoTime> {
    let Value::String(s) = v else { return None };
    if c.env.golden() && &**s == GOLDEN_NOW {
        return Some(GoTime::utc(c.env.now_time()));
    }
    GoTime::from_go_string(s)
}

/// A `time.Time` parameter.
fn time_arg(c: &Call<'_>, v: &Value) -> Result<GoTime, GoError> {
    time_value(c, v).ok_or_else(|| wrong_type("time.Time", v))
}

/// sprig's `dateInZone`: a time, or an integer of Unix seconds, or else now; formatted
/// with Go's `layout` in `zone` (UTC when the zone does not load).
fn date_in_zone(c: &Call<'_>, layout: &str, date: &Value, zone: &str) -> Result<Value, GoError> {
    let t = match date {
        Value::Int(secs) => GoTime::utc(unix(*secs)),
        other => time_value(c, other).unwrap_or_else(|| GoTime::utc(c.env.now_time())),
    };
    let out = format(&t.in_location(zone), layout);
    c.charge(out.len())?;
    Ok(string(out))
}

fn date_modify(c: &Call<'_>, a: &[Value], must: bool) -> Result<Value, GoError> {
    let spec = str_arg(&a[0])?;
    let t = time_arg(c, &a[1])?;
    let Some(d) = parse_go_duration(spec) else {
        if must {
            return Err(c.fail(format!(
                "time: invalid duration {}",
                crate::go::go_quote(spec)
            )));
        }
        return Ok(string(t.to_go_string()));
    };
    let at =
        t.at.checked_add_signed(TimeDelta::nanoseconds(d))
            .ok_or_else(|| c.fail("time out of range"))?;
    Ok(string(GoTime { at, zone: t.zone }.to_go_string()))
}

/// `Duration.Round(time.Second)`: halves away from zero.
fn round_to_second(ns: i64) -> i64 {
    let (q, r) = (ns / 1_000_000_000, ns % 1_000_000_000);
    let q = if r.abs() * 2 >= 1_000_000_000 {
        q + r.signum()
    } else {
        q
    };
    q.saturating_mul(1_000_000_000)
}

/// sprig's `durationRound`: the largest whole unit (y = 365 days, mo = 30 days).
fn duration_round(ns: i64) -> String {
    const SECOND: u64 = 1_000_000_000;
    let u = ns.unsigned_abs();
    let units = [
        (SECOND * 3600 * 24 * 365, "y"),
        (SECOND * 3600 * 24 * 30, "mo"),
        (SECOND * 3600 * 24, "d"),
        (SECOND * 3600, "h"),
        (SECOND * 60, "m"),
        (SECOND, "s"),
    ];
    for (size, unit) in units {
        if u > size {
            return format!("{}{unit}", u / size);
        }
    }
    "0s".to_owned()
}
