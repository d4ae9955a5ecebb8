//! sprig's defaults and JSON functions: `default`, `empty`, `coalesce`, `all`, `any`,
//! `ternary`, `fromJson`, `toJson`, `toPrettyJson`, `toRawJson` (and their `must*`
//! forms), `deepCopy`, and `fail`.

use gotmpl::{TemplateError as GoError, Value};

use super::conv::{bool_arg, empty, str_arg, string};
use super::{
    Arity::{AtLeast, Exact},
    Call, Func, f,
};
use crate::template::value::{JsonStyle, go_json_styled};

pub(crate) const FUNCS: &[Func] = &[
    f("default", AtLeast(1), |_, a| {
        Ok(match a.get(1) {
            Some(given) if !empty(given) => given.clone(),
            _ => a[0].clone(),
        })
    }),
    f("empty", Exact(1), |_, a| Ok(Value::Bool(empty(&a[0])))),
    f("coalesce", AtLeast(0), |_, a| {
        Ok(a.iter().find(|v| !empty(v)).cloned().unwrap_or(Value::Nil))
    }),
    f("all", AtLeast(0), |_, a| {
        Ok(Value::Bool(a.iter().all(|v| !empty(v))))
    }),
    f("any", AtLeast(0), |_, a| {
        Ok(Value::Bool(a.iter().any(|v| !empty(v))))
    }),
    f("ternary", Exact(3), |_, a| {
        Ok(if bool_arg(&a[2])? {
            a[0].clone()
        } else {
            a[1].clone()
        })
    }),
    f("fromJson", Exact(1), |_, a| {
        Ok(from_json(str_arg(&a[0])?).unwrap_or(Value::Nil))
    }),
    f("mustFromJson", Exact(1), |c, a| {
        from_json(str_arg(&a[0])?).map_err(|e| c.fail(e))
    }),
    f("toJson", Exact(1), |c, a| {
        to_json(c, &a[0], JsonStyle::COMPACT, false)
    }),
    f("mustToJson", Exact(1), |c, a| {
        to_json(c, &a[0], JsonStyle::COMPACT, true)
    }),
    f("toPrettyJson", Exact(1), |c, a| {
        to_json(c, &a[0], JsonStyle::PRETTY, false)
    }),
    f("mustToPrettyJson", Exact(1), |c, a| {
        to_json(c, &a[0], JsonStyle::PRETTY, true)
    }),
    f("toRawJson", Exact(1), |c, a| {
        to_json(c, &a[0], JsonStyle::RAW, false)
    }),
    f("mustToRawJson", Exact(1), |c, a| {
        to_json(c, &a[0], JsonStyle::RAW, true)
    }),
    f("deepCopy", Exact(1), deep_copy),
    f("mustDeepCopy", Exact(1), deep_copy),
    f("fail", Exact(1), |c, a| Err(c.fail(str_arg(&a[0])?))),
];

fn deep_copy(c: &Call<'_>, a: &[Value]) -> Result<Value, GoError> {
    match &a[0] {
        Value::Nil => Err(c.fail("copy: Input cannot be nil")),
        // Values are immutable: a copy shares nothing that can change.
        other => Ok(other.clone()),
    }
}

/// `json.Unmarshal` into `interface{}`: every number is a float64, as in Go.
fn from_json(text: &str) -> Result<Value, String> {
    let parsed: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    Ok(floats(&parsed))
}

fn floats(v: &serde_json::Value) -> Value {
    match v {
        serde_json::Value::Number(n) => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        serde_json::Value::Array(items) => Value::List(items.iter().map(floats).collect()),
        serde_json::Value::Object(m) => Value::Map(std::sync::Arc::new(
            m.iter()
                .map(|(k, v)| (std::sync::Arc::from(k.as_str()), floats(v)))
                .collect(),
        )),
        other => crate::template::value::from_json(other),
    }
}

/// `json.Marshal` in a style; sprig's plain forms print nothing on an error.
fn to_json(c: &Call<'_>, v: &Value, style: JsonStyle, must: bool) -> Result<Value, GoError> {
    match go_json_styled(v, style) {
        Ok(text) => {
            c.charge(text.len())?;
            Ok(string(text))
        }
        Err(e) if must => Err(c.fail(e)),
        Err(_) => Ok(string("")),
    }
}
