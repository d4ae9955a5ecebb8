//! sprig's dict functions: `dict`, `get`, `set`, `unset`, `hasKey`, `pluck`, `keys`,
//! `pick`, `omit`, `merge`, `mergeOverwrite`, `values`, `dig`.
//!
//! Dicts are immutable: `set`, `unset` and the merges return the new dict (sprig changes
//! its argument in place and returns it), so write `{{ $d = set $d "k" "v" }}` where a
//! Helm chart would write `{{ $_ := set $d "k" "v" }}`. `keys` and `values` come in key
//! order (Go's are in random order).

use std::collections::BTreeMap;
use std::sync::Arc;

use gotmpl::{TemplateError as GoError, Value};

use super::conv::{empty, list, map, map_arg, str_arg, string, strings, strval, type_of};
use super::{
    Arity::{AtLeast, Exact},
    Call, Func, f,
};

type Dict = BTreeMap<Arc<str>, Value>;

pub(crate) const FUNCS: &[Func] = &[
    f("dict", AtLeast(0), |c, a| {
        c.charge(std::mem::size_of_val(a))?;
        let mut d = Dict::new();
        for pair in a.chunks(2) {
            let value = pair.get(1).cloned().unwrap_or_else(|| string(""));
            d.insert(Arc::from(strval(&pair[0])), value);
        }
        Ok(map(d))
    }),
    f("get", Exact(2), |_, a| {
        let (d, key) = (map_arg(&a[0])?, str_arg(&a[1])?);
        Ok(d.get(key).cloned().unwrap_or_else(|| string("")))
    }),
    f("set", Exact(3), |c, a| {
        let (d, key) = (map_arg(&a[0])?, str_arg(&a[1])?);
        c.charge(d.len() * std::mem::size_of::<Value>())?;
        let mut d = (**d).clone();
        d.insert(Arc::from(key), a[2].clone());
        Ok(map(d))
    }),
    f("unset", Exact(2), |_, a| {
        let (d, key) = (map_arg(&a[0])?, str_arg(&a[1])?);
        let mut d = (**d).clone();
        d.remove(key);
        Ok(map(d))
    }),
    f("hasKey", Exact(2), |_, a| {
        let key = str_arg(&a[1])?;
        match &a[0] {
            Value::Nil => Ok(Value::Bool(false)),
            other => Ok(Value::Bool(map_arg(other)?.contains_key(key))),
        }
    }),
    f("pluck", AtLeast(1), |_, a| {
        let key = str_arg(&a[0])?;
        let mut out = Vec::new();
        for d in &a[1..] {
            if let Some(v) = map_arg(d)?.get(key) {
                out.push(v.clone());
            }
        }
        Ok(list(out))
    }),
    f("keys", AtLeast(0), |_, a| {
        let mut out = Vec::new();
        for d in a {
            out.extend(map_arg(d)?.keys().map(ToString::to_string));
        }
        Ok(strings(out))
    }),
    f("pick", AtLeast(1), |_, a| {
        let d = map_arg(&a[0])?;
        let mut out = Dict::new();
        for k in &a[1..] {
            let k = str_arg(k)?;
            if let Some((key, v)) = d.get_key_value(k) {
                out.insert(key.clone(), v.clone());
            }
        }
        Ok(map(out))
    }),
    f("omit", AtLeast(1), |_, a| {
        let d = map_arg(&a[0])?;
        let omit = a[1..].iter().map(str_arg).collect::<Result<Vec<_>, _>>()?;
        Ok(map(d
            .iter()
            .filter(|(k, _)| !omit.contains(&&***k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()))
    }),
    f("merge", AtLeast(1), |c, a| merge(c, a, false)),
    f("mustMerge", AtLeast(1), |c, a| merge(c, a, false)),
    f("mergeOverwrite", AtLeast(1), |c, a| merge(c, a, true)),
    f("mustMergeOverwrite", AtLeast(1), |c, a| merge(c, a, true)),
    f("values", Exact(1), |_, a| {
        Ok(list(map_arg(&a[0])?.values().cloned().collect()))
    }),
    f("dig", AtLeast(3), dig),
];

/// mergo's `Merge` (or, with `overwrite`, `Merge` with `WithOverride`) of each source into
/// the first dict: nested dicts merge key by key; a key the destination lacks (or holds
/// empty) is taken from the source; with `overwrite` the source's value wins, even an
/// empty one.
fn merge(c: &Call<'_>, a: &[Value], overwrite: bool) -> Result<Value, GoError> {
    let mut dst = (**map_arg(&a[0])?).clone();
    for src in &a[1..] {
        let src = map_arg(src)?;
        c.charge(src.len() * std::mem::size_of::<Value>())?;
        merge_into(&mut dst, src, overwrite);
    }
    Ok(map(dst))
}

fn merge_into(dst: &mut Dict, src: &Dict, overwrite: bool) {
    for (k, v) in src {
        match (dst.get_mut(k), v) {
            (Some(Value::Map(d)), Value::Map(s)) => {
                let mut merged = (**d).clone();
                merge_into(&mut merged, s, overwrite);
                *d = Arc::new(merged);
            }
            (Some(existing), v) => {
                if empty(existing) || overwrite {
                    *existing = v.clone();
                }
            }
            (None, v) => {
                dst.insert(k.clone(), v.clone());
            }
        }
    }
}

/// `dig "a" "b" default dict`: the value at the path, or the default where a key is
/// missing.
fn dig(c: &Call<'_>, a: &[Value]) -> Result<Value, GoError> {
    let (path, rest) = a.split_at(a.len() - 2);
    let default = &rest[0];
    let mut current = match &rest[1] {
        Value::Map(m) => m,
        other => {
            return Err(c.fail(format!(
                "interface conversion: interface {{}} is {}, not map[string]interface {{}}",
                type_of(other)
            )));
        }
    };
    for (i, key) in path.iter().enumerate() {
        let key = match key {
            Value::String(s) => s,
            other => {
                return Err(c.fail(format!(
                    "interface conversion: interface {{}} is {}, not string",
                    type_of(other)
                )));
            }
        };
        let Some(step) = current.get(&**key) else {
            return Ok(default.clone());
        };
        if i + 1 == path.len() {
            return Ok(step.clone());
        }
        current = match step {
            Value::Map(m) => m,
            other => {
                return Err(c.fail(format!(
                    "interface conversion: interface {{}} is {}, not map[string]interface {{}}",
                    type_of(other)
                )));
            }
        };
    }
    Ok(default.clone())
}
