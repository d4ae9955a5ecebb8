//! sprig's list functions: `list`, `first`, `rest`, `last`, `initial`, `append`,
//! `prepend`, `concat`, `reverse`, `uniq`, `without`, `has`, `slice`, `chunk`, `compact`,
//! and their `must*` forms (which fail the same way here: sprig's plain forms panic, and
//! Go reports the panic as the call's error).
//!
//! Lists are immutable: `append $l 1` returns a new list and `$l` keeps its items.

use gotmpl::{TemplateError as GoError, Value};

use super::conv::{deep_equal, empty, int_arg, kind_of, list, to_int64};
use super::{
    Arity::{AtLeast, Exact},
    Call, Func, f,
};

pub(crate) const FUNCS: &[Func] = &[
    f("list", AtLeast(0), |c, a| {
        c.charge(std::mem::size_of_val(a))?;
        Ok(list(a.to_vec()))
    }),
    f("tuple", AtLeast(0), |c, a| {
        c.charge(std::mem::size_of_val(a))?;
        Ok(list(a.to_vec()))
    }),
    f("append", Exact(2), push),
    f("push", Exact(2), push),
    f("mustAppend", Exact(2), push),
    f("mustPush", Exact(2), push),
    f("prepend", Exact(2), prepend),
    f("mustPrepend", Exact(2), prepend),
    f("first", Exact(1), first),
    f("mustFirst", Exact(1), first),
    f("rest", Exact(1), rest),
    f("mustRest", Exact(1), rest),
    f("last", Exact(1), last),
    f("mustLast", Exact(1), last),
    f("initial", Exact(1), initial),
    f("mustInitial", Exact(1), initial),
    f("reverse", Exact(1), reverse),
    f("mustReverse", Exact(1), reverse),
    f("uniq", Exact(1), uniq),
    f("mustUniq", Exact(1), uniq),
    f("without", AtLeast(1), without),
    f("mustWithout", AtLeast(1), without),
    f("has", Exact(2), has),
    f("mustHas", Exact(2), has),
    f("slice", AtLeast(1), slice),
    f("mustSlice", AtLeast(1), slice),
    f("concat", AtLeast(0), concat),
    f("chunk", Exact(2), chunk),
    f("mustChunk", Exact(2), chunk),
    f("compact", Exact(1), compact),
    f("mustCompact", Exact(1), compact),
];

/// The list argument, or sprig's error naming what it is (`Cannot push on type string`).
fn items<'v>(c: &Call<'_>, v: &'v Value, what: &str) -> Result<&'v [Value], GoError> {
    match v {
        Value::List(l) => Ok(l),
        Value::Nil => {
            Err(c.fail("runtime error: invalid memory address or nil pointer dereference"))
        }
        other => Err(c.fail(format!("{what} {}", kind_of(other)))),
    }
}

/// A new list of `n` items, charged first.
fn build(c: &Call<'_>, n: usize, items: impl Iterator<Item = Value>) -> Result<Value, GoError> {
    c.charge(n.saturating_mul(std::mem::size_of::<Value>()))?;
    Ok(list(items.collect()))
}

fn push(c: &Call<'_>, a: &[Value]) -> Result<Value, GoError> {
    let l = items(c, &a[0], "Cannot push on type")?;
    build(c, l.len() + 1, l.iter().cloned().chain([a[1].clone()]))
}

fn prepend(c: &Call<'_>, a: &[Value]) -> Result<Value, GoError> {
    let l = items(c, &a[0], "Cannot prepend on type")?;
    build(
        c,
        l.len() + 1,
        [a[1].clone()].into_iter().chain(l.iter().cloned()),
    )
}

fn first(c: &Call<'_>, a: &[Value]) -> Result<Value, GoError> {
    Ok(items(c, &a[0], "Cannot find first on type")?
        .first()
        .cloned()
        .unwrap_or(Value::Nil))
}

fn last(c: &Call<'_>, a: &[Value]) -> Result<Value, GoError> {
    Ok(items(c, &a[0], "Cannot find last on type")?
        .last()
        .cloned()
        .unwrap_or(Value::Nil))
}

fn rest(c: &Call<'_>, a: &[Value]) -> Result<Value, GoError> {
    let l = items(c, &a[0], "Cannot find rest on type")?;
    let tail = l.get(1..).unwrap_or_default();
    build(c, tail.len(), tail.iter().cloned())
}

fn initial(c: &Call<'_>, a: &[Value]) -> Result<Value, GoError> {
    let l = items(c, &a[0], "Cannot find initial on type")?;
    let head = l.get(..l.len().saturating_sub(1)).unwrap_or_default();
    build(c, head.len(), head.iter().cloned())
}

fn reverse(c: &Call<'_>, a: &[Value]) -> Result<Value, GoError> {
    let l = items(c, &a[0], "Cannot find reverse on type")?;
    build(c, l.len(), l.iter().rev().cloned())
}

fn uniq(c: &Call<'_>, a: &[Value]) -> Result<Value, GoError> {
    let l = items(c, &a[0], "Cannot find uniq on type")?;
    let mut out: Vec<Value> = Vec::new();
    for item in l {
        if !out.iter().any(|o| deep_equal(o, item)) {
            out.push(item.clone());
        }
    }
    build(c, out.len(), out.into_iter())
}

fn without(c: &Call<'_>, a: &[Value]) -> Result<Value, GoError> {
    let l = items(c, &a[0], "Cannot find without on type")?;
    let omit = &a[1..];
    let kept: Vec<Value> = l
        .iter()
        .filter(|item| !omit.iter().any(|o| deep_equal(o, item)))
        .cloned()
        .collect();
    build(c, kept.len(), kept.into_iter())
}

fn has(c: &Call<'_>, a: &[Value]) -> Result<Value, GoError> {
    if matches!(a[1], Value::Nil) {
        return Ok(Value::Bool(false));
    }
    let l = items(c, &a[1], "Cannot find has on type")?;
    Ok(Value::Bool(l.iter().any(|item| deep_equal(&a[0], item))))
}

fn slice(c: &Call<'_>, a: &[Value]) -> Result<Value, GoError> {
    let l = match &a[0] {
        Value::List(l) => l,
        other => {
            return Err(c.fail(format!(
                "list should be type of slice or array but {}",
                kind_of(other)
            )));
        }
    };
    if l.is_empty() {
        return Ok(Value::Nil);
    }
    let start = a.get(1).map_or(0, to_int64);
    let end = a
        .get(2)
        .map_or(i64::try_from(l.len()).unwrap_or(i64::MAX), to_int64);
    let (Ok(start), Ok(end)) = (usize::try_from(start), usize::try_from(end)) else {
        return Err(c.fail("reflect: slice index out of range"));
    };
    if start > end || end > l.len() {
        return Err(c.fail("reflect: slice index out of range"));
    }
    build(c, end - start, l[start..end].iter().cloned())
}

fn concat(c: &Call<'_>, a: &[Value]) -> Result<Value, GoError> {
    let mut total = 0usize;
    for v in a {
        match v {
            Value::List(l) => total += l.len(),
            other => return Err(c.fail(format!("Cannot concat type {} as list", kind_of(other)))),
        }
    }
    let all = a.iter().filter_map(|v| match v {
        Value::List(l) => Some(l.iter().cloned()),
        _ => None,
    });
    build(c, total, all.flatten())
}

fn chunk(c: &Call<'_>, a: &[Value]) -> Result<Value, GoError> {
    let size = int_arg(&a[0])?;
    let l = items(c, &a[1], "Cannot chunk type")?;
    let size = usize::try_from(size)
        .ok()
        .filter(|s| *s > 0)
        .ok_or_else(|| c.fail("runtime error: makeslice: len out of range"))?;
    c.charge(l.len().saturating_mul(std::mem::size_of::<Value>()) * 2)?;
    Ok(list(
        l.chunks(size).map(|part| list(part.to_vec())).collect(),
    ))
}

fn compact(c: &Call<'_>, a: &[Value]) -> Result<Value, GoError> {
    let l = items(c, &a[0], "Cannot compact on type")?;
    let kept: Vec<Value> = l.iter().filter(|v| !empty(v)).cloned().collect();
    build(c, kept.len(), kept.into_iter())
}
