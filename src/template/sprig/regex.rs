//! sprig's regular expressions: `regexMatch`, `regexFind`, `regexFindAll`,
//! `regexReplaceAll`, `regexReplaceAllLiteral`, `regexSplit`, `regexQuoteMeta`, and the
//! `must*` forms (the plain forms panic on a bad pattern in sprig, so both fail alike).
//!
//! Patterns are RE2 syntax, read by the `regex` crate, which implements the same
//! language; what differs: `\C` is refused, Unicode classes follow a newer Unicode, and
//! `\b` is Unicode-aware unless written `(?-u:\b)`. Replacements expand `$1`, `${1}`,
//! `$name` and `$$` as Go's `Expand` does.

use gotmpl::{TemplateError as GoError, Value};

use super::conv::{int_arg, str_arg, string, strings};
use super::{Arity::Exact, Call, Func, f};

pub(crate) const FUNCS: &[Func] = &[
    f("regexMatch", Exact(2), matches),
    f("mustRegexMatch", Exact(2), matches),
    f("regexFind", Exact(2), find),
    f("mustRegexFind", Exact(2), find),
    f("regexFindAll", Exact(3), find_all),
    f("mustRegexFindAll", Exact(3), find_all),
    f("regexReplaceAll", Exact(3), |c, a| replace(c, a, false)),
    f("mustRegexReplaceAll", Exact(3), |c, a| replace(c, a, false)),
    f("regexReplaceAllLiteral", Exact(3), |c, a| {
        replace(c, a, true)
    }),
    f("mustRegexReplaceAllLiteral", Exact(3), |c, a| {
        replace(c, a, true)
    }),
    f("regexSplit", Exact(3), split),
    f("mustRegexSplit", Exact(3), split),
    f("regexQuoteMeta", Exact(1), |_, a| {
        Ok(string(quote_meta(str_arg(&a[0])?)))
    }),
];

fn compile(c: &Call<'_>, pattern: &str) -> Result<regex::Regex, GoError> {
    regex::RegexBuilder::new(pattern)
        .size_limit(1 << 20)
        .build()
        .map_err(|e| {
            let detail = e.to_string();
            let last = detail.lines().last().unwrap_or_default().trim().to_owned();
            c.fail(format!(
                "regexp: Compile({pattern:?}): error parsing regexp: {last}"
            ))
        })
}

fn matches(c: &Call<'_>, a: &[Value]) -> Result<Value, GoError> {
    let re = compile(c, str_arg(&a[0])?)?;
    Ok(Value::Bool(re.is_match(str_arg(&a[1])?)))
}

fn find(c: &Call<'_>, a: &[Value]) -> Result<Value, GoError> {
    let re = compile(c, str_arg(&a[0])?)?;
    Ok(string(re.find(str_arg(&a[1])?).map_or("", |m| m.as_str())))
}

/// How many matches `n` asks for (`n < 0`: all).
fn limit(n: i64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

fn find_all(c: &Call<'_>, a: &[Value]) -> Result<Value, GoError> {
    let re = compile(c, str_arg(&a[0])?)?;
    let s = str_arg(&a[1])?;
    let n = int_arg(&a[2])?;
    let found: Vec<String> = re
        .find_iter(s)
        .take(limit(n))
        .map(|m| m.as_str().to_owned())
        .collect();
    c.charge(found.iter().map(String::len).sum())?;
    Ok(strings(found))
}

fn replace(c: &Call<'_>, a: &[Value], literal: bool) -> Result<Value, GoError> {
    let re = compile(c, str_arg(&a[0])?)?;
    let (s, repl) = (str_arg(&a[1])?, str_arg(&a[2])?);
    let hits = re.find_iter(s).count();
    c.charge(
        s.len()
            .saturating_add(hits.saturating_mul(repl.len().saturating_mul(2))),
    )?;
    let out = if literal {
        re.replace_all(s, regex::NoExpand(repl))
    } else {
        re.replace_all(s, repl)
    };
    Ok(string(out.into_owned()))
}

/// Go's `Regexp.Split(s, n)`.
fn split(c: &Call<'_>, a: &[Value]) -> Result<Value, GoError> {
    let pattern = str_arg(&a[0])?;
    let re = compile(c, pattern)?;
    let (s, n) = (str_arg(&a[1])?, int_arg(&a[2])?);
    if n == 0 {
        return Ok(strings(Vec::new()));
    }
    if !pattern.is_empty() && s.is_empty() {
        return Ok(strings(vec![String::new()]));
    }
    let mut out = Vec::new();
    let (mut begin, mut end) = (0, 0);
    for m in re.find_iter(s).take(limit(n)) {
        if n > 0 && out.len() == limit(n) - 1 {
            break;
        }
        end = m.start();
        if m.end() != 0 {
            out.push(s[begin..end].to_owned());
        }
        begin = m.end();
    }
    if end != s.len() {
        out.push(s[begin..].to_owned());
    }
    Ok(strings(out))
}

/// Go's `regexp.QuoteMeta`.
fn quote_meta(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 2);
    for ch in s.chars() {
        if r"\.+*?()|[]{}^$".contains(ch) {
            out.push('\\');
        }
        out.push(ch);
    }
    out
}
