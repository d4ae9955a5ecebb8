//! Go's view of template values for sprig: argument checks of typed parameters, `%v`
//! printing, sprig's number conversions (`cast.ToInt64`, `cast.ToFloat64`), `empty`, and
//! the type conversion and reflection functions (`atoi`, `int64`, `toString`, `typeOf`, ...).

use std::collections::BTreeMap;
use std::sync::Arc;

use gotmpl::{TemplateError as GoError, Value};

use super::{Arity::Exact, Func, f};
use crate::go::parse_go_int;
use crate::template::value::go_sprint_float;

pub(crate) const FUNCS: &[Func] = &[
    f("atoi", Exact(1), |_, a| {
        // strconv.Atoi: decimal only, errors give 0.
        let s = str_arg(&a[0])?;
        Ok(Value::Int(go_atoi(s).unwrap_or(0)))
    }),
    f("int", Exact(1), |_, a| Ok(Value::Int(to_int64(&a[0])))),
    f("int64", Exact(1), |_, a| Ok(Value::Int(to_int64(&a[0])))),
    f("float64", Exact(1), |_, a| {
        Ok(Value::Float(to_float64(&a[0])))
    }),
    f("toDecimal", Exact(1), |_, a| {
        let text = sprint(&a[0]);
        Ok(Value::Int(parse_octal(&text).unwrap_or(0)))
    }),
    f("toString", Exact(1), |_, a| Ok(string(strval(&a[0])))),
    f("toStrings", Exact(1), |_, a| Ok(strings(strslice(&a[0])))),
    f("typeOf", Exact(1), |_, a| Ok(string(type_of(&a[0])))),
    f("typeIs", Exact(2), |_, a| {
        Ok(Value::Bool(str_arg(&a[0])? == type_of(&a[1])))
    }),
    f("typeIsLike", Exact(2), |_, a| {
        let target = str_arg(&a[0])?;
        let t = type_of(&a[1]);
        Ok(Value::Bool(target == t || target == format!("*{t}")))
    }),
    f("kindOf", Exact(1), |_, a| Ok(string(kind_of(&a[0])))),
    f("kindIs", Exact(2), |_, a| {
        Ok(Value::Bool(str_arg(&a[0])? == kind_of(&a[1])))
    }),
    f("deepEqual", Exact(2), |_, a| {
        Ok(Value::Bool(deep_equal(&a[0], &a[1])))
    }),
];

pub(crate) fn string(s: impl Into<Arc<str>>) -> Value {
    Value::String(s.into())
}

pub(crate) fn strings(items: Vec<String>) -> Value {
    Value::List(items.into_iter().map(string).collect())
}

pub(crate) fn list(items: Vec<Value>) -> Value {
    Value::List(items.into())
}

pub(crate) fn map(items: BTreeMap<Arc<str>, Value>) -> Value {
    Value::Map(Arc::new(items))
}

/// Go's type name for a template value, as argument checks and `typeOf` print it.
pub(crate) fn type_of(value: &Value) -> &'static str {
    match value {
        Value::Nil => "<nil>",
        other => crate::template::funcs::go_type(other),
    }
}

/// `reflect.Kind` names.
pub(crate) fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Nil => "invalid",
        Value::Bool(_) => "bool",
        Value::Int(_) => "int",
        Value::Uint(_) => "uint64",
        Value::Float(_) => "float64",
        Value::String(_) => "string",
        Value::List(_) => "slice",
        Value::Map(_) => "map",
        _ => "func",
    }
}

/// text/template's error for an argument of the wrong type.
pub(crate) fn wrong_type(expected: &str, got: &Value) -> GoError {
    match got {
        Value::Nil => GoError::Exec(format!("invalid value; expected {expected}")),
        _ => GoError::Exec(format!(
            "wrong type for value; expected {expected}; got {}",
            type_of(got)
        )),
    }
}

/// A `string` parameter.
pub(crate) fn str_arg(value: &Value) -> Result<&str, GoError> {
    match value {
        Value::String(s) => Ok(s),
        other => Err(wrong_type("string", other)),
    }
}

/// An `int` parameter.
pub(crate) fn int_arg(value: &Value) -> Result<i64, GoError> {
    match value {
        Value::Int(i) => Ok(*i),
        Value::Uint(u) => i64::try_from(*u).map_err(|_| wrong_type("int", value)),
        other => Err(wrong_type("int", other)),
    }
}

/// A `bool` parameter.
pub(crate) fn bool_arg(value: &Value) -> Result<bool, GoError> {
    match value {
        Value::Bool(b) => Ok(*b),
        other => Err(wrong_type("bool", other)),
    }
}

/// A `map[string]interface{}` parameter.
pub(crate) fn map_arg(value: &Value) -> Result<&Arc<BTreeMap<Arc<str>, Value>>, GoError> {
    match value {
        Value::Map(m) => Ok(m),
        other => Err(wrong_type("map[string]interface {}", other)),
    }
}

/// A `[]interface{}` parameter (nil is an empty list, as Go passes a nil slice).
pub(crate) fn list_arg(value: &Value) -> Result<&[Value], GoError> {
    match value {
        Value::List(l) => Ok(l),
        Value::Nil => Ok(&[]),
        other => Err(wrong_type("[]interface {}", other)),
    }
}

/// Go's `fmt.Sprint(v)` (`%v`).
pub(crate) fn sprint(value: &Value) -> String {
    let mut out = String::new();
    write_sprint(value, &mut out);
    out
}

fn write_sprint(value: &Value, out: &mut String) {
    match value {
        Value::Nil => out.push_str("<nil>"),
        Value::Float(f) => out.push_str(&go_sprint_float(*f)),
        Value::String(s) => out.push_str(s),
        Value::List(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                write_sprint(item, out);
            }
            out.push(']');
        }
        Value::Map(m) => {
            out.push_str("map[");
            for (i, (k, v)) in m.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                out.push_str(k);
                out.push(':');
                write_sprint(v, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// sprig's `strval`: a string as is, anything else with `%v`.
pub(crate) fn strval(value: &Value) -> String {
    sprint(value)
}

/// sprig's `strslice`: a list's non-nil items as strings; nil is empty; anything else is
/// a one-item list.
pub(crate) fn strslice(value: &Value) -> Vec<String> {
    match value {
        Value::List(items) => items
            .iter()
            .filter(|v| !matches!(v, Value::Nil))
            .map(strval)
            .collect(),
        Value::Nil => Vec::new(),
        other => vec![strval(other)],
    }
}

/// sprig's `empty`: nil, zero numbers, false, and empty strings, lists and maps.
pub(crate) fn empty(value: &Value) -> bool {
    !value.is_truthy()
}

/// `cast.ToInt64`: numbers truncated, strings parsed as Go integer literals (`"0x1F"`,
/// `"010"` octal, `"5.0"`), bools 1/0, anything else 0.
pub(crate) fn to_int64(value: &Value) -> i64 {
    match value {
        Value::Int(i) => *i,
        #[allow(clippy::cast_possible_wrap)]
        Value::Uint(u) => *u as i64,
        #[allow(clippy::cast_possible_truncation)]
        Value::Float(f) => *f as i64,
        Value::Bool(b) => i64::from(*b),
        Value::String(s) => parse_go_int(trim_zero_decimal(s)).unwrap_or(0),
        _ => 0,
    }
}

/// `cast`'s `trimZeroDecimal`: `"5.00"` → `"5"`.
fn trim_zero_decimal(s: &str) -> &str {
    match s.split_once('.') {
        Some((int, frac))
            if !int.is_empty() && !frac.is_empty() && frac.bytes().all(|b| b == b'0') =>
        {
            int
        }
        _ => s,
    }
}

/// `cast.ToFloat64`: numbers converted, strings parsed (`strconv.ParseFloat`), bools 1/0,
/// anything else 0.
pub(crate) fn to_float64(value: &Value) -> f64 {
    match value {
        #[allow(clippy::cast_precision_loss)]
        Value::Int(i) => *i as f64,
        #[allow(clippy::cast_precision_loss)]
        Value::Uint(u) => *u as f64,
        Value::Float(f) => *f,
        Value::Bool(b) => f64::from(u8::from(*b)),
        Value::String(s) => parse_go_float(s).unwrap_or(0.0),
        _ => 0.0,
    }
}

/// `strconv.ParseFloat(s, 64)` for decimal input (underscores and hex floats are not read).
pub(crate) fn parse_go_float(s: &str) -> Option<f64> {
    let lower = s.to_ascii_lowercase();
    let body = lower.trim_start_matches(['+', '-']);
    if matches!(body, "inf" | "infinity" | "nan") {
        return s.parse().ok();
    }
    if body.is_empty()
        || !body
            .bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'+' | b'-'))
    {
        return None;
    }
    s.parse().ok()
}

/// `strconv.Atoi`: an optional sign and decimal digits.
pub(crate) fn go_atoi(s: &str) -> Option<i64> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// `strconv.ParseInt(s, 8, 64)`.
fn parse_octal(s: &str) -> Option<i64> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
        return None;
    }
    i64::from_str_radix(s, 8).ok()
}

/// `reflect.DeepEqual` on template values: same type, same contents (NaN is unequal to
/// itself).
pub(crate) fn deep_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Nil, Value::Nil) => true,
        (Value::Bool(x), Value::Bool(y)) => x == y,
        (Value::Int(x), Value::Int(y)) => x == y,
        (Value::Uint(x), Value::Uint(y)) => x == y,
        #[allow(clippy::float_cmp)]
        (Value::Float(x), Value::Float(y)) => x == y,
        (Value::String(x), Value::String(y)) => x == y,
        (Value::List(x), Value::List(y)) => {
            x.len() == y.len() && x.iter().zip(y.iter()).all(|(a, b)| deep_equal(a, b))
        }
        (Value::Map(x), Value::Map(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| deep_equal(v, w)))
        }
        _ => false,
    }
}
