//! Values crossing the template boundary: JSON objects in, Go-formatted text out.
//!
//! Converts between [`serde_json::Value`] and the template engine's [`gotmpl::Value`], and
//! reproduces the Go formatting KWOK's template functions produce: `encoding/json`'s
//! `Marshal` (HTML-safe escaping, sorted keys, float spelling), `strconv.Quote`, `%#v` of a
//! string and `time.RFC3339Nano`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use gotmpl::Value;

use super::reach::Reach;
use crate::go::{FloatVerb, go_format_float};

/// A JSON value as template data. Maps keep sorted keys, like Go's map iteration in
/// templates.
pub(crate) fn from_json(value: &serde_json::Value) -> Value {
    match value {
        serde_json::Value::Null => Value::Nil,
        serde_json::Value::Bool(b) => Value::Bool(*b),
        serde_json::Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Value::Int(i)
            } else if let Some(u) = n.as_u64() {
                Value::Uint(u)
            } else {
                Value::Float(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        serde_json::Value::String(s) => Value::String(Arc::from(s.as_str())),
        serde_json::Value::Array(items) => Value::List(items.iter().map(from_json).collect()),
        serde_json::Value::Object(map) => Value::Map(Arc::new(
            map.iter()
                .map(|(k, v)| (Arc::from(k.as_str()), from_json(v)))
                .collect::<BTreeMap<_, _>>(),
        )),
    }
}

/// [`from_json`] of only the part of `value` that `reach` names: a map under
/// [`Reach::Fields`] keeps just the listed keys (those it has); anything else is
/// converted whole.
pub(crate) fn from_json_pruned(value: &serde_json::Value, reach: &Reach) -> Value {
    match (value, reach) {
        (serde_json::Value::Object(map), Reach::Fields(fields)) => Value::Map(Arc::new(
            fields
                .iter()
                .filter_map(|(key, reach)| {
                    map.get(&**key)
                        .map(|v| (Arc::clone(key), from_json_pruned(v, reach)))
                })
                .collect(),
        )),
        (value, _) => from_json(value),
    }
}

/// Template data as JSON, as Go's `json.Marshal` would see it.
///
/// # Errors
/// Go's message for values JSON cannot hold (NaN, infinities, functions).
pub(crate) fn to_json(value: &Value) -> Result<serde_json::Value, String> {
    Ok(match value {
        Value::Nil => serde_json::Value::Null,
        Value::Bool(b) => serde_json::Value::Bool(*b),
        Value::Int(i) => serde_json::Value::Number((*i).into()),
        Value::Uint(u) => serde_json::Value::Number((*u).into()),
        Value::Float(f) => serde_json::Number::from_f64(*f)
            .map(serde_json::Value::Number)
            .ok_or_else(|| format!("json: unsupported value: {}", go_sprint_float(*f)))?,
        Value::String(s) => serde_json::Value::String(s.to_string()),
        Value::List(items) => {
            serde_json::Value::Array(items.iter().map(to_json).collect::<Result<_, _>>()?)
        }
        Value::Map(map) => serde_json::Value::Object(
            map.iter()
                .map(|(k, v)| Ok((k.to_string(), to_json(v)?)))
                .collect::<Result<_, String>>()?,
        ),
        Value::Function(_) => return Err("json: unsupported type: func".to_owned()),
    })
}

/// Go's `json.Marshal(value)`.
///
/// # Errors
/// Go's message for values JSON cannot hold (NaN, infinities, functions).
pub(crate) fn go_json(value: &Value) -> Result<String, String> {
    go_json_styled(value, JsonStyle::COMPACT)
}

/// How [`go_json_styled`] writes: indented like `json.MarshalIndent(v, "", "  ")`, and
/// with `<`, `>`, `&` escaped (Go's default) or not (`SetEscapeHTML(false)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct JsonStyle {
    indent: bool,
    escape_html: bool,
}

impl JsonStyle {
    /// `json.Marshal`.
    pub(crate) const COMPACT: Self = Self {
        indent: false,
        escape_html: true,
    };
    /// `json.MarshalIndent(v, "", "  ")`.
    pub(crate) const PRETTY: Self = Self {
        indent: true,
        escape_html: true,
    };
    /// An encoder with `SetEscapeHTML(false)`.
    pub(crate) const RAW: Self = Self {
        indent: false,
        escape_html: false,
    };
}

/// Go's JSON encoding of `value` in `style`.
///
/// # Errors
/// Go's message for values JSON cannot hold (NaN, infinities, functions).
pub(crate) fn go_json_styled(value: &Value, style: JsonStyle) -> Result<String, String> {
    let mut out = String::new();
    write_go_json(value, style, 0, &mut out)?;
    Ok(out)
}

fn newline(style: JsonStyle, depth: usize, out: &mut String) {
    if style.indent {
        out.push('\n');
        for _ in 0..depth {
            out.push_str("  ");
        }
    }
}

fn write_go_json(
    value: &Value,
    style: JsonStyle,
    depth: usize,
    out: &mut String,
) -> Result<(), String> {
    match value {
        Value::Nil => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Int(i) => {
            let _ = write!(out, "{i}");
        }
        Value::Uint(u) => {
            let _ = write!(out, "{u}");
        }
        Value::Float(f) => out.push_str(&go_json_float(*f)?),
        Value::String(s) => write_go_json_string(s, style.escape_html, out),
        Value::List(items) if items.is_empty() => out.push_str("[]"),
        Value::List(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                newline(style, depth + 1, out);
                write_go_json(item, style, depth + 1, out)?;
            }
            newline(style, depth, out);
            out.push(']');
        }
        Value::Map(map) if map.is_empty() => out.push_str("{}"),
        Value::Map(map) => {
            out.push('{');
            for (i, (k, v)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                newline(style, depth + 1, out);
                write_go_json_string(k, style.escape_html, out);
                out.push(':');
                if style.indent {
                    out.push(' ');
                }
                write_go_json(v, style, depth + 1, out)?;
            }
            newline(style, depth, out);
            out.push('}');
        }
        Value::Function(_) => return Err("json: unsupported type: func".to_owned()),
    }
    Ok(())
}

/// `encoding/json`'s float spelling: `%f` unless the magnitude is below 1e-6 or from 1e21,
/// then `%e` with a one-digit negative exponent kept short (`1e-7`).
fn go_json_float(f: f64) -> Result<String, String> {
    if !f.is_finite() {
        return Err(format!("json: unsupported value: {}", go_sprint_float(f)));
    }
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        let s = go_format_float(f, FloatVerb::E, false);
        // e-07 → e-7
        if let Some(pos) = s.find("e-0") {
            return Ok(format!("{}e-{}", &s[..pos], &s[pos + 3..]));
        }
        return Ok(s);
    }
    Ok(go_format_float(f, FloatVerb::F, false))
}

/// `fmt.Sprint` of a float64.
pub(crate) fn go_sprint_float(f: f64) -> String {
    if f.is_nan() {
        "NaN".to_owned()
    } else if f.is_infinite() {
        if f > 0.0 { "+Inf" } else { "-Inf" }.to_owned()
    } else {
        go_format_float(f, FloatVerb::G, false)
    }
}

/// `encoding/json`'s string escaping, with HTML escaping on (Go's default) or off.
fn write_go_json_string(s: &str, escape_html: bool, out: &mut String) {
    out.push('"');
    // Most strings need no escaping: copy them whole. (0xE2 starts U+2028 and U+2029.)
    let plain = |b: u8| b >= 0x20 && !matches!(b, b'"' | b'\\' | b'<' | b'>' | b'&' | 0xE2);
    if s.bytes().all(plain) {
        out.push_str(s);
    } else {
        write_go_json_escaped(s, escape_html, out);
    }
    out.push('"');
}

/// The body of [`write_go_json_string`], escaped character by character.
fn write_go_json_escaped(s: &str, escape_html: bool, out: &mut String) {
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '<' | '>' | '&' if !escape_html => out.push(c),
            '<' | '>' | '&' | '\u{0}'..='\u{1f}' | '\u{2028}' | '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            _ => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::{DateTime, TimeZone, Utc};

    use super::*;
    use crate::go::go_rfc3339_nano;

    fn json(v: serde_json::Value) -> String {
        go_json(&from_json(&v)).expect("marshalable")
    }

    #[test]
    fn json_round_trip_keeps_types() {
        let v = serde_json::json!({
            "b": [1, -2, 18446744073709551615u64, 1.5, true, null, "x"],
            "a": {"k": "v"}
        });
        assert_eq!(to_json(&from_json(&v)).expect("convertible"), v);
    }

    #[test]
    fn go_json_escapes_like_encoding_json() {
        assert_eq!(
            json(serde_json::json!("<Now> & \"q\"\\\n\t\u{1}\u{2028}é")),
            r#""\u003cNow\u003e \u0026 \"q\"\\\n\t\u0001\u2028é""#
        );
        assert_eq!(
            json(serde_json::json!({"b": 1, "a": [true, null]})),
            r#"{"a":[true,null],"b":1}"#
        );
    }

    #[test]
    fn go_json_floats() {
        for (f, want) in [
            (1.5, "1.5"),
            (1.0, "1"),
            (1e20, "100000000000000000000"),
            (1e21, "1e+21"),
            (1e-6, "0.000001"),
            (1e-7, "1e-7"),
            (-2.5e-10, "-2.5e-10"),
            (123456789.0, "123456789"),
        ] {
            assert_eq!(go_json(&Value::Float(f)).expect("finite"), want, "{f}");
        }
        assert!(go_json(&Value::Float(f64::NAN)).is_err());
        assert!(go_json(&Value::Function(Arc::new(|_| Ok(Value::Nil)))).is_err());
    }

    proptest::proptest! {
        #[test]
        fn plain_strings_are_copied_as_escaping_would(s in "\\PC*|[a-z<>&\"\\\\\n\u{2028}é]*") {
            let mut fast = String::new();
            write_go_json_string(&s, true, &mut fast);
            let mut slow = String::from("\"");
            write_go_json_escaped(&s, true, &mut slow);
            slow.push('"');
            proptest::prop_assert_eq!(fast, slow);
        }

        #[test]
        fn rfc3339_nano_matches_chrono(secs in -62_135_596_800i64..253_402_300_799, nanos in 0u32..1_000_000_000) {
            let t = DateTime::from_timestamp(secs, nanos).expect("in range");
            let mut want = t.format("%Y-%m-%dT%H:%M:%S").to_string();
            let frac = format!("{nanos:09}");
            if nanos != 0 {
                want.push('.');
                want.push_str(frac.trim_end_matches('0'));
            }
            want.push('Z');
            proptest::prop_assert_eq!(go_rfc3339_nano(t), want);
        }
    }

    #[test]
    fn rfc3339_nano_trims_fraction() {
        let t = Utc
            .with_ymd_and_hms(2006, 1, 2, 15, 4, 5)
            .single()
            .expect("valid");
        assert_eq!(go_rfc3339_nano(t), "2006-01-02T15:04:05Z");
        let t = t + chrono::TimeDelta::milliseconds(500);
        assert_eq!(go_rfc3339_nano(t), "2006-01-02T15:04:05.5Z");
        let t = t + chrono::TimeDelta::nanoseconds(7);
        assert_eq!(go_rfc3339_nano(t), "2006-01-02T15:04:05.500000007Z");
    }

    #[test]
    fn sprint_float_like_go() {
        assert_eq!(go_sprint_float(1e6), "1e+06");
        assert_eq!(go_sprint_float(123456.0), "123456");
        assert_eq!(go_sprint_float(0.0001), "0.0001");
        assert_eq!(go_sprint_float(0.00001), "1e-05");
        assert_eq!(go_sprint_float(f64::NAN), "NaN");
        assert_eq!(go_sprint_float(f64::NEG_INFINITY), "-Inf");
    }
}
