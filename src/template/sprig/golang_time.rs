//! Go's `time` package as sprig's date functions use it: layouts written with the
//! reference time (`Mon Jan 2 15:04:05 MST 2006`), `Time.Format`, `time.ParseInLocation`,
//! `Time.String()`, and locations by IANA name (`Local` is UTC in kstage).

use chrono::{DateTime, Datelike, FixedOffset, Offset, TimeZone, Timelike, Utc};
use chrono_tz::OffsetName;

/// A time with the zone Go would print: an instant, its offset and the zone's abbreviation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GoTime {
    pub(crate) at: DateTime<FixedOffset>,
    pub(crate) zone: String,
}

impl GoTime {
    /// A UTC time.
    pub(crate) fn utc(at: DateTime<Utc>) -> Self {
        Self {
            at: at.fixed_offset(),
            zone: "UTC".to_owned(),
        }
    }

    /// The same instant in location `name` (`Local` and unknown names are UTC, as sprig
    /// falls back to UTC when a location does not load).
    pub(crate) fn in_location(&self, name: &str) -> Self {
        let utc = self.at.with_timezone(&Utc);
        match name.parse::<chrono_tz::Tz>() {
            Ok(tz) if name != "Local" => {
                let local = utc.with_timezone(&tz);
                let offset = local.offset();
                Self {
                    at: local.fixed_offset(),
                    zone: offset
                        .abbreviation()
                        .map_or_else(|| numeric_zone(offset.fix()), str::to_owned),
                }
            }
            _ => Self::utc(utc),
        }
    }

    /// `Time.String()`: `2006-01-02 15:04:05.999999999 -0700 MST`.
    pub(crate) fn to_go_string(&self) -> String {
        format(self, "2006-01-02 15:04:05.999999999 -0700 MST")
    }

    /// Reads [`GoTime::to_go_string`]'s form back.
    pub(crate) fn from_go_string(s: &str) -> Option<Self> {
        let (rest, zone) = s.rsplit_once(' ')?;
        let at = DateTime::parse_from_str(rest, "%Y-%m-%d %H:%M:%S%.f %z").ok()?;
        Some(Self {
            at,
            zone: zone.to_owned(),
        })
    }
}

/// Go's name for a zone without an abbreviation: `+03`, `-0530`.
fn numeric_zone(offset: FixedOffset) -> String {
    let secs = offset.local_minus_utc();
    let sign = if secs < 0 { '-' } else { '+' };
    let (h, m) = (secs.abs() / 3600, secs.abs() / 60 % 60);
    if m == 0 {
        format!("{sign}{h:02}")
    } else {
        format!("{sign}{h:02}{m:02}")
    }
}

/// One piece of a layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk<'a> {
    Literal(&'a str),
    LongMonth,
    Month,
    NumMonth,
    ZeroMonth,
    LongWeekday,
    Weekday,
    Day,
    UnderDay,
    ZeroDay,
    UnderYearDay,
    ZeroYearDay,
    Hour,
    Hour12,
    ZeroHour12,
    Minute,
    ZeroMinute,
    Second,
    ZeroSecond,
    LongYear,
    Year,
    PM,
    Pm,
    Tz,
    /// Offsets: with `Z` for UTC, with colons, with seconds, hours only.
    Offset {
        z: bool,
        colon: bool,
        seconds: bool,
        hours_only: bool,
    },
    /// A fraction: separator, digits, trailing zeros trimmed (`.999`).
    Fraction {
        sep: u8,
        digits: usize,
        trim: bool,
    },
}

/// The next chunk of `layout` and what follows it (Go's `nextStdChunk`).
fn next_chunk(layout: &str) -> (Chunk<'_>, &str) {
    let b = layout.as_bytes();
    for i in 0..b.len() {
        let rest = &layout[i..];
        if let Some((chunk, len)) = std_chunk(rest) {
            if i > 0 {
                return (Chunk::Literal(&layout[..i]), &layout[i..]);
            }
            return (chunk, &layout[len..]);
        }
    }
    (Chunk::Literal(layout), "")
}

/// The standard chunk at the start of `s`, with its length.
fn std_chunk(s: &str) -> Option<(Chunk<'static>, usize)> {
    const TABLE: &[(&str, Chunk<'static>)] = &[
        ("January", Chunk::LongMonth),
        ("Jan", Chunk::Month),
        ("Monday", Chunk::LongWeekday),
        ("Mon", Chunk::Weekday),
        ("MST", Chunk::Tz),
        ("002", Chunk::ZeroYearDay),
        ("01", Chunk::ZeroMonth),
        ("02", Chunk::ZeroDay),
        ("03", Chunk::ZeroHour12),
        ("04", Chunk::ZeroMinute),
        ("05", Chunk::ZeroSecond),
        ("06", Chunk::Year),
        ("15", Chunk::Hour),
        ("1", Chunk::NumMonth),
        ("2006", Chunk::LongYear),
        ("2", Chunk::Day),
        ("__2", Chunk::UnderYearDay),
        ("_2", Chunk::UnderDay),
        ("3", Chunk::Hour12),
        ("4", Chunk::Minute),
        ("5", Chunk::Second),
        ("PM", Chunk::PM),
        ("pm", Chunk::Pm),
    ];
    const OFFSETS: &[(&str, bool, bool, bool)] = &[
        // suffix after '-' or 'Z', colon, seconds, hours only
        ("070000", false, true, false),
        ("07:00:00", true, true, false),
        ("0700", false, false, false),
        ("07:00", true, false, false),
        ("07", false, false, true),
    ];
    if s.starts_with("Mon")
        && !s.starts_with("Monday")
        && s[3..].starts_with(|c: char| c.is_ascii_lowercase())
    {
        return None;
    }
    if s.starts_with("Jan")
        && !s.starts_with("January")
        && s[3..].starts_with(|c: char| c.is_ascii_lowercase())
    {
        return None;
    }
    for &(text, chunk) in TABLE {
        if s.starts_with(text) {
            return Some((chunk, text.len()));
        }
    }
    let first = *s.as_bytes().first()?;
    if first == b'-' || first == b'Z' {
        for &(suffix, colon, seconds, hours_only) in OFFSETS {
            if s[1..].starts_with(suffix) {
                let chunk = Chunk::Offset {
                    z: first == b'Z',
                    colon,
                    seconds,
                    hours_only,
                };
                return Some((chunk, 1 + suffix.len()));
            }
        }
    }
    if (first == b'.' || first == b',') && s.len() > 1 {
        let digit = s.as_bytes()[1];
        if digit == b'0' || digit == b'9' {
            let run = s[1..].bytes().take_while(|&c| c == digit).count();
            if !s[1 + run..].starts_with(|c: char| c.is_ascii_digit()) {
                let chunk = Chunk::Fraction {
                    sep: first,
                    digits: run,
                    trim: digit == b'9',
                };
                return Some((chunk, 1 + run));
            }
        }
    }
    None
}

const LONG_MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const LONG_DAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];

/// `Time.Format(layout)`.
pub(crate) fn format(t: &GoTime, layout: &str) -> String {
    let mut out = String::with_capacity(layout.len() + 10);
    let mut rest = layout;
    while !rest.is_empty() {
        let (chunk, after) = next_chunk(rest);
        write_chunk(t, chunk, &mut out);
        rest = after;
    }
    out
}

fn write_chunk(t: &GoTime, chunk: Chunk<'_>, out: &mut String) {
    use std::fmt::Write as _;
    let at = &t.at;
    let month0 = at.month0() as usize;
    let h12 = match at.hour() % 12 {
        0 => 12,
        h => h,
    };
    let _ = match chunk {
        Chunk::Literal(s) => write!(out, "{s}"),
        Chunk::LongMonth => write!(out, "{}", LONG_MONTHS[month0]),
        Chunk::Month => write!(out, "{}", &LONG_MONTHS[month0][..3]),
        Chunk::NumMonth => write!(out, "{}", at.month()),
        Chunk::ZeroMonth => write!(out, "{:02}", at.month()),
        Chunk::LongWeekday => write!(
            out,
            "{}",
            LONG_DAYS[at.weekday().num_days_from_sunday() as usize]
        ),
        Chunk::Weekday => write!(
            out,
            "{}",
            &LONG_DAYS[at.weekday().num_days_from_sunday() as usize][..3]
        ),
        Chunk::Day => write!(out, "{}", at.day()),
        Chunk::UnderDay => write!(out, "{:>2}", at.day()),
        Chunk::ZeroDay => write!(out, "{:02}", at.day()),
        Chunk::UnderYearDay => write!(out, "{:>3}", at.ordinal()),
        Chunk::ZeroYearDay => write!(out, "{:03}", at.ordinal()),
        Chunk::Hour => write!(out, "{:02}", at.hour()),
        Chunk::Hour12 => write!(out, "{h12}"),
        Chunk::ZeroHour12 => write!(out, "{h12:02}"),
        Chunk::Minute => write!(out, "{}", at.minute()),
        Chunk::ZeroMinute => write!(out, "{:02}", at.minute()),
        Chunk::Second => write!(out, "{}", at.second()),
        Chunk::ZeroSecond => write!(out, "{:02}", at.second()),
        Chunk::LongYear => write!(out, "{:04}", at.year()),
        Chunk::Year => write!(out, "{:02}", at.year().rem_euclid(100)),
        Chunk::PM => write!(out, "{}", if at.hour() >= 12 { "PM" } else { "AM" }),
        Chunk::Pm => write!(out, "{}", if at.hour() >= 12 { "pm" } else { "am" }),
        Chunk::Tz => write!(out, "{}", t.zone),
        Chunk::Offset {
            z,
            colon,
            seconds,
            hours_only,
        } => {
            write_offset(
                at.offset().local_minus_utc(),
                z,
                colon,
                seconds,
                hours_only,
                out,
            );
            Ok(())
        }
        Chunk::Fraction { sep, digits, trim } => {
            let nanos = format!("{:09}", at.nanosecond() % 1_000_000_000);
            let mut frac = &nanos[..digits.min(9)];
            if trim {
                frac = frac.trim_end_matches('0');
                if frac.is_empty() {
                    return;
                }
            }
            write!(out, "{}{frac}", char::from(sep))
        }
    };
}

fn write_offset(
    secs: i32,
    z: bool,
    colon: bool,
    seconds: bool,
    hours_only: bool,
    out: &mut String,
) {
    use std::fmt::Write as _;
    if z && secs == 0 {
        out.push('Z');
        return;
    }
    let sign = if secs < 0 { '-' } else { '+' };
    let a = secs.abs();
    let (h, m, s) = (a / 3600, a / 60 % 60, a % 60);
    let sep = if colon { ":" } else { "" };
    let _ = write!(out, "{sign}{h:02}");
    if !hours_only {
        let _ = write!(out, "{sep}{m:02}");
    }
    if seconds {
        let _ = write!(out, "{sep}{s:02}");
    }
}

/// What a parse has read so far.
#[derive(Default)]
struct Fields {
    year: Option<i32>,
    month: Option<u32>,
    day: Option<u32>,
    year_day: Option<u32>,
    hour: u32,
    minute: u32,
    second: u32,
    nanos: u32,
    pm: Option<bool>,
    offset: Option<i32>,
}

/// `time.ParseInLocation(layout, value, Local)` (Local is UTC here).
///
/// # Errors
/// Go's message: `parsing time "VALUE" as "LAYOUT": cannot parse "REST" as "CHUNK"`.
pub(crate) fn parse(layout: &str, value: &str) -> Result<GoTime, String> {
    let mut fields = Fields::default();
    let (mut rest_layout, mut rest) = (layout, value);
    let cannot = |rest: &str, chunk: &str| {
        format!("parsing time {value:?} as {layout:?}: cannot parse {rest:?} as {chunk:?}")
    };
    while !rest_layout.is_empty() {
        let (chunk, after) = next_chunk(rest_layout);
        let chunk_text = &rest_layout[..rest_layout.len() - after.len()];
        rest =
            parse_chunk(chunk, rest, &mut fields, after).ok_or_else(|| cannot(rest, chunk_text))?;
        rest_layout = after;
    }
    if !rest.is_empty() {
        return Err(format!("parsing time {value:?}: extra text: {rest:?}"));
    }
    build(&fields).ok_or_else(|| format!("parsing time {value:?}: day out of range"))
}

fn build(f: &Fields) -> Option<GoTime> {
    let mut hour = f.hour;
    match f.pm {
        Some(true) if hour < 12 => hour += 12,
        Some(false) if hour == 12 => hour = 0,
        _ => {}
    }
    let year = f.year.unwrap_or(0);
    let date = match (f.year_day, f.month, f.day) {
        (Some(yd), None, None) => chrono::NaiveDate::from_yo_opt(year, yd)?,
        _ => chrono::NaiveDate::from_ymd_opt(year, f.month.unwrap_or(1), f.day.unwrap_or(1))?,
    };
    let naive = date.and_hms_nano_opt(hour, f.minute, f.second, f.nanos)?;
    let offset = FixedOffset::east_opt(f.offset.unwrap_or(0))?;
    let at = offset.from_local_datetime(&naive).single()?;
    // A parsed offset has no zone name: Go prints it as `-0700`.
    let zone = match f.offset.unwrap_or(0) {
        0 => "UTC".to_owned(),
        secs => {
            let sign = if secs < 0 { '-' } else { '+' };
            format!("{sign}{:02}{:02}", secs.abs() / 3600, secs.abs() / 60 % 60)
        }
    };
    Some(GoTime { at, zone })
}

/// Reads `width` digits (or 1..=`width` when not `fixed`).
fn digits(s: &str, min: usize, max: usize) -> Option<(u32, &str)> {
    let n = s.bytes().take(max).take_while(u8::is_ascii_digit).count();
    if n < min {
        return None;
    }
    Some((s[..n].parse().ok()?, &s[n..]))
}

fn name<'a>(s: &'a str, names: &[&str], short: bool) -> Option<(usize, &'a str)> {
    names.iter().enumerate().find_map(|(i, full)| {
        let want = if short { &full[..3] } else { full };
        let head = s.get(..want.len())?;
        head.eq_ignore_ascii_case(want)
            .then(|| (i, &s[want.len()..]))
    })
}

fn parse_chunk<'a>(chunk: Chunk<'_>, s: &'a str, f: &mut Fields, after: &str) -> Option<&'a str> {
    let rest = match chunk {
        Chunk::Literal(lit) => s.strip_prefix(lit)?,
        Chunk::LongMonth | Chunk::Month => {
            let (i, rest) = name(s, &LONG_MONTHS, chunk == Chunk::Month)?;
            f.month = Some(u32::try_from(i).ok()? + 1);
            rest
        }
        Chunk::LongWeekday | Chunk::Weekday => name(s, &LONG_DAYS, chunk == Chunk::Weekday)?.1,
        Chunk::NumMonth | Chunk::ZeroMonth => {
            let (m, rest) = digits(s, if chunk == Chunk::ZeroMonth { 2 } else { 1 }, 2)?;
            (1..=12).contains(&m).then_some(())?;
            f.month = Some(m);
            rest
        }
        Chunk::Day | Chunk::UnderDay | Chunk::ZeroDay => {
            let s = if chunk == Chunk::UnderDay {
                s.strip_prefix(' ').unwrap_or(s)
            } else {
                s
            };
            let (d, rest) = digits(s, if chunk == Chunk::ZeroDay { 2 } else { 1 }, 2)?;
            f.day = Some(d);
            rest
        }
        Chunk::UnderYearDay | Chunk::ZeroYearDay => {
            let (d, rest) = digits(s.trim_start_matches(' '), 1, 3)?;
            f.year_day = Some(d);
            rest
        }
        Chunk::Hour | Chunk::Hour12 | Chunk::ZeroHour12 => {
            let (h, rest) = digits(s, if chunk == Chunk::Hour12 { 1 } else { 2 }, 2)?;
            (h < if chunk == Chunk::Hour { 24 } else { 13 }).then_some(())?;
            f.hour = h;
            rest
        }
        Chunk::Minute | Chunk::ZeroMinute => {
            let (m, rest) = digits(s, if chunk == Chunk::Minute { 1 } else { 2 }, 2)?;
            (m < 60).then_some(())?;
            f.minute = m;
            rest
        }
        Chunk::Second | Chunk::ZeroSecond => parse_seconds(chunk, s, f, after)?,
        Chunk::LongYear => {
            let (y, rest) = digits(s, 4, 4)?;
            f.year = Some(i32::try_from(y).ok()?);
            rest
        }
        Chunk::Year => {
            let (y, rest) = digits(s, 2, 2)?;
            let y = i32::try_from(y).ok()?;
            f.year = Some(if y >= 69 { 1900 + y } else { 2000 + y });
            rest
        }
        Chunk::PM | Chunk::Pm => {
            let word = s.get(..2)?;
            f.pm = Some(match word.to_ascii_uppercase().as_str() {
                "PM" => true,
                "AM" => false,
                _ => return None,
            });
            &s[2..]
        }
        Chunk::Tz => parse_zone_name(s, f)?,
        Chunk::Offset {
            z,
            colon,
            seconds,
            hours_only,
        } => parse_offset(s, f, z, colon, seconds, hours_only)?,
        Chunk::Fraction {
            sep,
            digits: n,
            trim,
        } => parse_fraction(s, f, sep, n, trim)?,
    };
    Some(rest)
}

/// Seconds, and a fraction after them that the layout does not show (Go reads it too).
fn parse_seconds<'a>(chunk: Chunk<'_>, s: &'a str, f: &mut Fields, after: &str) -> Option<&'a str> {
    let (sec, mut rest) = digits(s, if chunk == Chunk::Second { 1 } else { 2 }, 2)?;
    (sec < 60).then_some(())?;
    f.second = sec;
    if !matches!(next_chunk(after).0, Chunk::Fraction { .. })
        && rest.len() > 1
        && matches!(rest.as_bytes()[0], b'.' | b',')
        && rest.as_bytes()[1].is_ascii_digit()
    {
        let n = rest[1..].bytes().take_while(u8::is_ascii_digit).count();
        f.nanos = fraction(&rest[1..=n]);
        rest = &rest[1 + n..];
    }
    Some(rest)
}

/// A fraction chunk: `.000` needs exactly its digits, `.999` takes any (or none).
fn parse_fraction<'a>(
    s: &'a str,
    f: &mut Fields,
    sep: u8,
    n: usize,
    trim: bool,
) -> Option<&'a str> {
    if trim {
        if s.as_bytes().first() != Some(&sep) {
            return Some(s);
        }
        let len = s[1..].bytes().take_while(u8::is_ascii_digit).count();
        f.nanos = fraction(&s[1..=len]);
        return Some(&s[1 + len..]);
    }
    (s.as_bytes().first() == Some(&sep)).then_some(())?;
    let d = s.get(1..=n)?;
    d.bytes().all(|b| b.is_ascii_digit()).then_some(())?;
    f.nanos = fraction(d);
    Some(&s[1 + n..])
}

/// Nanoseconds of a fraction's digits (beyond nine dropped).
fn fraction(d: &str) -> u32 {
    let d = &d[..d.len().min(9)];
    let v: u32 = d.parse().unwrap_or(0);
    v * 10u32.pow(9 - u32::try_from(d.len()).unwrap_or(9))
}

/// A zone abbreviation: `UTC`/`GMT` are offset 0, and so is any other abbreviation Go
/// does not know in the parse location.
fn parse_zone_name<'a>(s: &'a str, f: &mut Fields) -> Option<&'a str> {
    let n = s.bytes().take_while(u8::is_ascii_uppercase).count();
    (3..=5).contains(&n).then_some(())?;
    f.offset.get_or_insert(0);
    Some(&s[n..])
}

fn parse_offset<'a>(
    s: &'a str,
    f: &mut Fields,
    z: bool,
    colon: bool,
    seconds: bool,
    hours_only: bool,
) -> Option<&'a str> {
    if z && let Some(rest) = s.strip_prefix('Z') {
        f.offset = Some(0);
        return Some(rest);
    }
    let sign = match s.as_bytes().first()? {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    let (h, mut rest) = digits(&s[1..], 2, 2)?;
    let mut total = h * 3600;
    let part = |rest: &mut &'a str| -> Option<u32> {
        if colon {
            *rest = rest.strip_prefix(':')?;
        }
        let (v, r) = digits(rest, 2, 2)?;
        *rest = r;
        Some(v)
    };
    if !hours_only {
        total += part(&mut rest)? * 60;
    }
    if seconds {
        total += part(&mut rest)?;
    }
    f.offset = Some(sign * i32::try_from(total).ok()?);
    Some(rest)
}
