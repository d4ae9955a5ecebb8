//! Scalars as go-yaml v2 sees them: how a plain scalar is typed, and Go's float spelling.

use std::fmt::Write as _;

/// The type go-yaml v2 gives an untagged plain scalar.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Scalar {
    Null,
    Bool(bool),
    Int(i64),
    Uint(u64),
    Float(f64),
    Str,
}

/// go-yaml v2's `resolve("", s)` for a plain scalar.
pub(super) fn resolve_plain(s: &str) -> Scalar {
    let Some(&first) = s.as_bytes().first() else {
        return Scalar::Null;
    };
    match s {
        "y" | "Y" | "yes" | "Yes" | "YES" | "true" | "True" | "TRUE" | "on" | "On" | "ON" => {
            return Scalar::Bool(true);
        }
        "n" | "N" | "no" | "No" | "NO" | "false" | "False" | "FALSE" | "off" | "Off" | "OFF" => {
            return Scalar::Bool(false);
        }
        "~" | "null" | "Null" | "NULL" => return Scalar::Null,
        ".nan" | ".NaN" | ".NAN" => return Scalar::Float(f64::NAN),
        ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => {
            return Scalar::Float(f64::INFINITY);
        }
        "-.inf" | "-.Inf" | "-.INF" => return Scalar::Float(f64::NEG_INFINITY),
        _ => {}
    }
    match first {
        b'.' => {
            // Go's ParseFloat on text starting with '.': decimal digits, optional exponent.
            if is_yaml_float(s) {
                parse_finite(s).map_or(Scalar::Str, Scalar::Float)
            } else {
                Scalar::Str
            }
        }
        b'+' | b'-' | b'0'..=b'9' => {
            let plain: String = s.chars().filter(|c| *c != '_').collect();
            if let Some(i) = crate::go::parse_go_int(&plain) {
                return Scalar::Int(i);
            }
            if let Some(u) = crate::go::parse_go_uint(&plain) {
                return Scalar::Uint(u);
            }
            if is_yaml_float(&plain) {
                return parse_finite(&plain).map_or(Scalar::Str, Scalar::Float);
            }
            Scalar::Str
        }
        _ => Scalar::Str,
    }
}

fn parse_finite(s: &str) -> Option<f64> {
    s.parse::<f64>().ok().filter(|f| f.is_finite())
}

/// `^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`
fn is_yaml_float(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    if matches!(b.first(), Some(b'+' | b'-')) {
        i += 1;
    }
    let digits = |i: &mut usize| {
        let start = *i;
        while b.get(*i).is_some_and(u8::is_ascii_digit) {
            *i += 1;
        }
        *i - start
    };
    if b.get(i) == Some(&b'.') {
        i += 1;
        if digits(&mut i) == 0 {
            return false;
        }
    } else {
        if digits(&mut i) == 0 {
            return false;
        }
        if b.get(i) == Some(&b'.') {
            i += 1;
            digits(&mut i);
        }
    }
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(b.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        if digits(&mut i) == 0 {
            return false;
        }
    }
    i == b.len()
}

/// go-yaml v2's `isBase60Float`: `^[-+]?[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?$`.
pub(super) fn is_base60_float(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    if matches!(b.first(), Some(b'+' | b'-')) {
        i += 1;
    }
    if !b.get(i).is_some_and(u8::is_ascii_digit) {
        return false;
    }
    i += 1;
    while b.get(i).is_some_and(|c| c.is_ascii_digit() || *c == b'_') {
        i += 1;
    }
    let mut groups = 0;
    while b.get(i) == Some(&b':') {
        i += 1;
        match (b.get(i), b.get(i + 1)) {
            (Some(b'0'..=b'5'), Some(b'0'..=b'9')) => i += 2,
            (Some(b'0'..=b'9'), _) => i += 1,
            _ => return false,
        }
        groups += 1;
    }
    if groups == 0 {
        return false;
    }
    if b.get(i) == Some(&b'.') {
        i += 1;
        while b.get(i).is_some_and(|c| c.is_ascii_digit() || *c == b'_') {
            i += 1;
        }
    }
    i == b.len()
}

/// A Go `strconv.FormatFloat` verb.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FloatVerb {
    /// `'g'`: `%e` for exponents below -4 or from 6 up, `%f` otherwise.
    G,
    /// `'e'`: `d.ddde±dd`.
    E,
    /// `'f'`: no exponent.
    F,
}

/// Go's `strconv.FormatFloat(f, verb, -1, 64)` (or `32` when `single`): the shortest
/// digits that read back to `f`. Non-finite values use go-yaml's `.inf`/`-.inf`/`.nan`.
pub(crate) fn go_format_float(f: f64, verb: FloatVerb, single: bool) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
