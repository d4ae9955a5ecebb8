//! Go compatibility: how Go's `strconv` and `time` parse and format the integers,
//! floats, strings, durations and times that Stages, templates, YAML and command lines
//! hold, so kstage reads and writes them as KWOK does (`strconv.ParseInt(s, 0, 64)`,
//! `strconv.FormatFloat`, `strconv.Quote`, `time.ParseDuration`, `time.Duration.String`,
//! RFC 3339 with an optional fraction). One implementation each.

use std::fmt::Write as _;

use chrono::{DateTime, Datelike, NaiveDate, TimeDelta, Timelike, Utc};

/// Go's `strconv.ParseInt(s, 0, 64)`: optional sign, then `0x`/`0o`/`0b`/`0` prefixes select
/// the base, `_` may separate digits; `None` on syntax or range errors.
pub fn parse_go_int(s: &str) -> Option<i64> {
    let (negative, digits) = match s.as_bytes().first()? {
        b'+' => (false, &s[1..]),
        b'-' => (true, &s[1..]),
        _ => (false, s),
    };
    let magnitude = parse_go_uint(digits)?;
    if negative {
        0i64.checked_sub_unsigned(magnitude)
    } else {
        i64::try_from(magnitude).ok()
    }
}

/// Go's `strconv.ParseUint(s, 0, 64)`: `0x`/`0o`/`0b`/`0` prefixes select the base, `_`
/// may separate digits, no sign; `None` on syntax or range errors.
pub fn parse_go_uint(s: &str) -> Option<u64> {
    let bytes = s.as_bytes();
    let lower = |b: u8| b.to_ascii_lowercase();
    let (base, body): (u64, &[u8]) = match bytes {
        [] => return None,
        [b'0', p, _, ..] if lower(*p) == b'b' => (2, &bytes[2..]),
        [b'0', p, _, ..] if lower(*p) == b'o' => (8, &bytes[2..]),
        [b'0', p, _, ..] if lower(*p) == b'x' => (16, &bytes[2..]),
        [b'0', ..] => (8, &bytes[1..]),
        _ => (10, bytes),
    };
    let mut n: u64 = 0;
    let mut underscores = false;
    for &c in body {
        if c == b'_' {
            underscores = true;
            continue;
        }
        let digit = match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'z' => c - b'a' + 10,
            b'A'..=b'Z' => c - b'A' + 10,
            _ => return None,
        };
        let digit = u64::from(digit);
        if digit >= base {
            return None;
        }
        n = n.checked_mul(base)?.checked_add(digit)?;
    }
    if underscores && !go_underscores_ok(bytes) {
        return None;
    }
    Some(n)
}

/// Go's `underscoreOK`: underscores only between digits, or after a base prefix.
fn go_underscores_ok(s: &[u8]) -> bool {
    let mut saw = b'^';
    let mut i = 0;
    let mut hex = false;
    if s.len() >= 2 && s[0] == b'0' && matches!(s[1].to_ascii_lowercase(), b'b' | b'o' | b'x') {
        i = 2;
        saw = b'0';
        hex = s[1].eq_ignore_ascii_case(&b'x');
    }
    for &c in &s[i..] {
        if c.is_ascii_digit() || (hex && c.is_ascii_hexdigit()) {
            saw = b'0';
        } else if c == b'_' {
            if saw != b'0' {
                return false;
            }
            saw = b'_';
        } else {
            if saw == b'_' {
                return false;
            }
            saw = b'!';
        }
    }
    saw != b'_'
}

/// Go's `time.ParseDuration` in nanoseconds: `"300ms"`, `"-1.5h"`, `"2h45m"`, `"0"`; units
/// `ns`, `us`/`µs`/`μs`, `ms`, `s`, `m`, `h`. `None` on syntax errors and overflow.
pub fn parse_go_duration(s: &str) -> Option<i64> {
    const LIMIT: u64 = 1 << 63;
    let mut rest = s.as_bytes();
    let negative = match rest.first() {
        Some(b'-') => true,
        Some(b'+') => false,
        _ => false,
    };
    if matches!(rest.first(), Some(b'-' | b'+')) {
        rest = &rest[1..];
    }
    if rest == b"0" {
        return Some(0);
    }
    if rest.is_empty() {
        return None;
    }
    let mut total: u64 = 0;
    while !rest.is_empty() {
        if !(rest[0] == b'.' || rest[0].is_ascii_digit()) {
            return None;
        }
        // integer part
        let int_len = rest.iter().take_while(|c| c.is_ascii_digit()).count();
        let mut value: u64 = 0;
        for &c in &rest[..int_len] {
            if value > LIMIT / 10 {
                return None;
            }
            value = value * 10 + u64::from(c - b'0');
            if value > LIMIT {
                return None;
            }
        }
        rest = &rest[int_len..];
        // fraction
        let (mut fraction, mut scale, mut frac_len) = (0u64, 1f64, 0usize);
        let has_point = rest.first() == Some(&b'.');
        if has_point {
            rest = &rest[1..];
            frac_len = rest.iter().take_while(|c| c.is_ascii_digit()).count();
            let mut overflow = false;
            for &c in &rest[..frac_len] {
                if overflow {
                    continue;
                }
                if fraction > (LIMIT - 1) / 10 {
                    overflow = true;
                    continue;
                }
                let next = fraction * 10 + u64::from(c - b'0');
                if next > LIMIT {
                    overflow = true;
                    continue;
                }
                fraction = next;
                scale *= 10.0;
            }
            rest = &rest[frac_len..];
        }
        if int_len == 0 && frac_len == 0 {
            return None;
        }
        // unit
        let unit_len = rest
            .iter()
            .take_while(|c| !(**c == b'.' || c.is_ascii_digit()))
            .count();
        if unit_len == 0 {
            return None;
        }
        let unit: u64 = match &rest[..unit_len] {
            b"ns" => 1,
            // `us`, `µs` (U+00B5) and `μs` (U+03BC)
            b"us" | b"\xC2\xB5s" | b"\xCE\xBCs" => 1_000,
            b"ms" => 1_000_000,
            b"s" => 1_000_000_000,
            b"m" => 60_000_000_000,
            b"h" => 3_600_000_000_000,
            _ => return None,
        };
        rest = &rest[unit_len..];
        if value > LIMIT / unit {
            return None;
        }
        value *= unit;
        if fraction > 0 {
            value += (fraction as f64 * (unit as f64 / scale)) as u64;
            if value > LIMIT {
                return None;
            }
        }
        total = total.checked_add(value)?;
        if total > LIMIT {
            return None;
        }
    }
    if negative {
        0i64.checked_sub_unsigned(total)
    } else {
        i64::try_from(total).ok()
    }
}

/// Go's `Duration.String()`: `"1h2m3.5s"`, `"1.5ms"`, `"0s"`.
pub fn format_go_duration(ns: i64) -> String {
    let sign = if ns < 0 { "-" } else { "" };
    let u = ns.unsigned_abs();
    if u < 1_000_000_000 {
        let (precision, unit) = match u {
            0 => return "0s".to_owned(),
            1..1_000 => (0, "ns"),
            1_000..1_000_000 => (3, "µs"),
            _ => (6, "ms"),
        };
        let (int, fraction) = split_fraction(u, precision);
        return format!("{sign}{int}{fraction}{unit}");
    }
    let (seconds, fraction) = split_fraction(u, 9);
    let (h, m, s) = (seconds / 3600, seconds / 60 % 60, seconds % 60);
    match (h, m) {
        (0, 0) => format!("{sign}{s}{fraction}s"),
        (0, _) => format!("{sign}{m}m{s}{fraction}s"),
        _ => format!("{sign}{h}h{m}m{s}{fraction}s"),
    }
}

/// `v / 10^precision` and its fraction as `".25"` (trailing zeros trimmed, empty when 0).
fn split_fraction(v: u64, precision: u32) -> (u64, String) {
    let scale = 10u64.pow(precision);
    let fraction = v % scale;
    if fraction == 0 {
        return (v / scale, String::new());
    }
    let digits = format!("{fraction:0width$}", width = precision as usize);
    (v / scale, format!(".{}", digits.trim_end_matches('0')))
}

/// Go's fast RFC 3339 parser (`time.Parse(time.RFC3339Nano, s)`):
/// `YYYY-MM-DDTHH:MM:SS[.fraction](Z|±HH:MM)`, digits beyond nanoseconds dropped.
pub fn parse_go_time(s: &str) -> Option<DateTime<Utc>> {
    let b = s.as_bytes();
    if b.len() < 19 {
        return None;
    }
    let num = |range: std::ops::Range<usize>| -> Option<u32> {
        b[range].iter().try_fold(0u32, |n, c| {
            c.is_ascii_digit().then(|| n * 10 + u32::from(c - b'0'))
        })
    };
    if !(b[4] == b'-' && b[7] == b'-' && b[10] == b'T' && b[13] == b':' && b[16] == b':') {
        return None;
    }
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, minute, second) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    let mut rest = &b[19..];
    let mut nanos = 0u32;
    if rest.len() >= 2 && rest[0] == b'.' && rest[1].is_ascii_digit() {
        let len = 1 + rest[1..].iter().take_while(|c| c.is_ascii_digit()).count();
        let digits = &rest[1..len.min(10)];
        nanos = digits
            .iter()
            .fold(0u32, |n, c| n * 10 + u32::from(c - b'0'))
            * 10u32.pow(9 - u32::try_from(digits.len()).unwrap_or(9));
        rest = &rest[len..];
    }
    let offset_seconds: i64 = match rest {
        [b'Z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let two = |a: u8, b: u8| {
                (a.is_ascii_digit() && b.is_ascii_digit())
                    .then(|| i64::from((a - b'0') * 10 + (b - b'0')))
            };
            let (oh, om) = (two(*h1, *h2)?, two(*m1, *m2)?);
            if oh > 23 || om > 59 {
                return None;
            }
            let offset = (oh * 60 + om) * 60;
            if *sign == b'-' { -offset } else { offset }
        }
        _ => return None,
    };
    let local = NaiveDate::from_ymd_opt(i32::try_from(year).ok()?, month, day)?
        .and_hms_nano_opt(hour, minute, second, nanos)?;
    Some(local.and_utc() - TimeDelta::seconds(offset_seconds))
}

/// A Go `strconv.FormatFloat` verb.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FloatVerb {
    /// `'g'`: `%e` for exponents below -4 or from 6 up, `%f` otherwise.
    G,
    /// `'e'`: `d.ddde±dd`.
    E,
    /// `'f'`: no exponent.
    F,
}

/// Go's `strconv.FormatFloat(f, verb, -1, 64)` (or `32` when `single`): the shortest
/// digits that read back to `f`. Non-finite values use go-yaml's `.inf`/`-.inf`/`.nan`.
pub fn go_format_float(f: f64, verb: FloatVerb, single: bool) -> String {
    if f.is_nan() {
        return ".nan".to_owned();
    }
    if f.is_infinite() {
        return if f > 0.0 { ".inf" } else { "-.inf" }.to_owned();
    }
    // Rust's `{:e}` prints the shortest round-trip digits, as Go's shortest formatting does.
    #[allow(clippy::cast_possible_truncation)]
    let sci = if single {
        format!("{:e}", f as f32)
    } else {
        format!("{f:e}")
    };
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let mut out = String::new();
    if mantissa.starts_with('-') {
        out.push('-');
    }
    let exponent_form = match verb {
        FloatVerb::E => true,
        FloatVerb::F => false,
        FloatVerb::G => !(-4..6).contains(&exp),
    };
    if exponent_form {
        let (head, tail) = digits.split_at(1.min(digits.len()));
        out.push_str(head);
        if !tail.is_empty() {
            out.push('.');
            out.push_str(tail);
        }
        out.push('e');
        out.push(if exp < 0 { '-' } else { '+' });
        let _ = write!(out, "{:02}", exp.unsigned_abs());
    } else if exp < 0 {
        out.push_str("0.");
        for _ in 0..(-exp - 1) {
            out.push('0');
        }
        out.push_str(&digits);
    } else {
        let int_len = usize::try_from(exp).unwrap_or(0) + 1;
        if digits.len() <= int_len {
            out.push_str(&digits);
            for _ in digits.len()..int_len {
                out.push('0');
            }
        } else {
            out.push_str(&digits[..int_len]);
            out.push('.');
            out.push_str(&digits[int_len..]);
        }
    }
    out
}

/// Go's `strconv.Quote`.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{b}' => out.push_str("\\v"),
            _ if go_is_print(c) => out.push(c),
            _ if u32::from(c) < 0x80 => {
                let _ = write!(out, "\\x{:02x}", u32::from(c));
            }
            _ if u32::from(c) < 0x10000 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            _ => {
                let _ = write!(out, "\\U{:08x}", u32::from(c));
            }
        }
    }
    out.push('"');
    out
}

/// An approximation of Go's `strconv.IsPrint` (no Unicode category tables here): the space,
/// and anything that is not a control, a separator, a format character, a private-use
/// character or a noncharacter.
fn go_is_print(c: char) -> bool {
    if c == ' ' {
        return true;
    }
    let v = u32::from(c);
    !(c.is_control()
        || c.is_whitespace()
        || matches!(v, 0xAD | 0x600..=0x605 | 0x61C | 0x6DD | 0x70F | 0x180E)
        || matches!(v, 0x200B..=0x200F | 0x202A..=0x202E | 0x2060..=0x206F | 0xFEFF)
        || matches!(v, 0xFFF9..=0xFFFB | 0xE000..=0xF8FF | 0xF0000..)
        || (v & 0xFFFE) == 0xFFFE
        || (0xFDD0..=0xFDEF).contains(&v))
}

/// `time.Time.Format(time.RFC3339Nano)` of a UTC time: trailing zeros of the fraction are
/// dropped, and the fraction with them when it is zero.
pub fn go_rfc3339_nano(t: DateTime<Utc>) -> String {
    let mut out = String::with_capacity(30);
    let year = t.year();
    // chrono's own formatting for the rare cases (years beyond four digits, leap seconds).
    if (0..=9999).contains(&year) && t.nanosecond() < 1_000_000_000 {
        let _ = write!(
            out,
            "{year:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
            t.month(),
            t.day(),
            t.hour(),
            t.minute(),
            t.second()
        );
    } else {
        let _ = write!(out, "{}", t.format("%Y-%m-%dT%H:%M:%S"));
    }
    let nanos = t.nanosecond() % 1_000_000_000;
    if nanos != 0 {
        let frac = format!("{nanos:09}");
        out.push('.');
        out.push_str(frac.trim_end_matches('0'));
    }
    out.push('Z');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_int_parsing() {
        for (s, want) in [
            ("0", Some(0)),
            ("42", Some(42)),
            ("+42", Some(42)),
            ("-42", Some(-42)),
            ("0x1F", Some(31)),
            ("0X1f", Some(31)),
            ("0o17", Some(15)),
            ("017", Some(15)),
            ("0b101", Some(5)),
            ("1_000", Some(1000)),
            ("0x_1F", Some(31)),
            ("9223372036854775807", Some(i64::MAX)),
            ("-9223372036854775808", Some(i64::MIN)),
            ("9223372036854775808", None),
            ("08", None),
            ("0x", None),
            ("1__0", None),
            ("_1", None),
            ("1_", None),
            ("", None),
            ("-", None),
            (" 1", None),
            ("1.0", None),
            ("1e3", None),
        ] {
            assert_eq!(parse_go_int(s), want, "{s:?}");
        }
    }

    #[test]
    fn go_duration_parsing() {
        for (s, want) in [
            ("0", Some(0)),
            ("-0", Some(0)),
            ("5s", Some(5_000_000_000)),
            ("1m30s", Some(90_000_000_000)),
            ("100ms", Some(100_000_000)),
            ("1.5h", Some(5_400_000_000_000)),
            ("-1.5h", Some(-5_400_000_000_000)),
            ("+2h45m", Some(9_900_000_000_000)),
            (".5s", Some(500_000_000)),
            ("1.s", Some(1_000_000_000)),
            ("10us", Some(10_000)),
            ("10µs", Some(10_000)),
            ("10μs", Some(10_000)),
            ("3ns", Some(3)),
            ("1.000000001s", Some(1_000_000_001)),
            ("9223372036854775807ns", Some(i64::MAX)),
            ("9223372036854775808ns", None),
            ("-9223372036854775808ns", Some(i64::MIN)),
            ("2562048h", None),
            ("", None),
            ("5", None),
            ("s", None),
            (".s", None),
            ("5d", None),
            ("1m 30s", None),
            ("abc", None),
        ] {
            assert_eq!(parse_go_duration(s), want, "{s:?}");
        }
    }

    #[test]
    fn go_duration_formatting() {
        for (ns, want) in [
            (0, "0s"),
            (1, "1ns"),
            (1_100, "1.1µs"),
            (2_200_000, "2.2ms"),
            (3_300_000_000, "3.3s"),
            (90_000_000_000, "1m30s"),
            (3_600_000_000_000, "1h0m0s"),
            (-5_000_000_000, "-5s"),
            (i64::MIN, "-2562047h47m16.854775808s"),
        ] {
            assert_eq!(format_go_duration(ns), want);
            assert_eq!(parse_go_duration(want), Some(ns), "{want}");
        }
    }

    #[test]
    fn go_time_parsing() {
        let at = |s: &str| {
            parse_go_time(s).map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Nanos, true))
        };
        assert_eq!(
            at("2006-01-02T15:04:05Z").as_deref(),
            Some("2006-01-02T15:04:05.000000000Z")
        );
        assert_eq!(
            at("2006-01-02T15:04:05.123456789123Z").as_deref(),
            Some("2006-01-02T15:04:05.123456789Z")
        );
        assert_eq!(
            at("2006-01-02T15:04:05.5-07:00").as_deref(),
            Some("2006-01-02T22:04:05.500000000Z")
        );
        for bad in [
            "2006-01-02 15:04:05Z",
            "2006-01-02t15:04:05Z",
            "2006-01-02T15:04:05z",
            "2006-01-02T15:04:05",
            "2006-02-30T15:04:05Z",
            "2006-01-02T24:00:00Z",
            "2006-01-02T15:04:60Z",
            "2006-01-02T15:04:05+0700",
            "2006-01-02T15:04:05.Z",
            "06-01-02T15:04:05Z",
            "5s",
        ] {
            assert_eq!(parse_go_time(bad), None, "{bad}");
        }
    }

    #[test]
    fn go_float_formats() {
        for (f, g) in [
            (1e6, "1e+06"),
            (123456.0, "123456"),
            (1.5, "1.5"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (-1.25e-10, "-1.25e-10"),
            (1e100, "1e+100"),
        ] {
            assert_eq!(go_format_float(f, FloatVerb::G, false), g, "{f}");
        }
        assert_eq!(
            go_format_float(1e20, FloatVerb::F, false),
            "100000000000000000000"
        );
        assert_eq!(go_format_float(0.1, FloatVerb::G, true), "0.1");
        assert_eq!(go_format_float(f64::NAN, FloatVerb::G, false), ".nan");
    }

    #[test]
    fn go_quote_escapes() {
        assert_eq!(go_quote("node"), r#""node""#);
        assert_eq!(go_quote(""), r#""""#);
        assert_eq!(go_quote("a\"b\\c"), r#""a\"b\\c""#);
        assert_eq!(go_quote("\n\t\u{7}\u{1}\u{7f}"), r#""\n\t\a\x01\x7f""#);
        assert_eq!(
            go_quote("é日本\u{200b}\u{10ffff}"),
            "\"é日本\\u200b\\U0010ffff\""
        );
    }
}
