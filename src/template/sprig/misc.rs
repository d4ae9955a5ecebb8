//! sprig's OS, network, path, UUID, semantic version and URL functions, and what the
//! other groups share for non-deterministic results (random numbers and the placeholders
//! of `--kwok-golden`).
//!
//! `env` and `expandenv` read only the variables the daemon was given
//! (`--template-env NAME,...`); any other name reads as unset. `getHostByName` does no
//! DNS: it fails, so a Stage cannot make the daemon resolve names.

use std::collections::BTreeMap;
use std::sync::Arc;

use gotmpl::Value;

use super::conv::{map, map_arg, str_arg, string};
use super::{Arity::Exact, Func, f};
use crate::go::go_quote;
use crate::template::env::TemplateEnv;

pub(crate) const FUNCS: &[Func] = &[
    f("env", Exact(1), |c, a| {
        Ok(string(c.env.env_var(str_arg(&a[0])?).unwrap_or_default()))
    }),
    f("expandenv", Exact(1), |c, a| {
        let s = str_arg(&a[0])?;
        let out = expand(s, |name| c.env.env_var(name).unwrap_or_default());
        c.charge(out.len())?;
        Ok(string(out))
    }),
    f("getHostByName", Exact(1), |c, a| {
        let _ = str_arg(&a[0])?;
        Err(c.fail("DNS lookups are disabled in kstage templates"))
    }),
    f("uuidv4", Exact(0), |c, a| {
        if c.env.golden() {
            return Ok(string(placeholder(c.name, a)));
        }
        let mut bytes = [0u8; 16];
        c.env.random_bytes(&mut bytes);
        Ok(string(
            uuid::Builder::from_random_bytes(bytes)
                .into_uuid()
                .to_string(),
        ))
    }),
    f("semver", Exact(1), |c, a| {
        let v = super::semver::Version::parse(str_arg(&a[0])?).map_err(|e| c.fail(e))?;
        Ok(v.to_value())
    }),
    f("semverCompare", Exact(2), |c, a| {
        let constraint =
            super::semver::Constraints::parse(str_arg(&a[0])?).map_err(|e| c.fail(e))?;
        let v = super::semver::Version::parse(str_arg(&a[1])?).map_err(|e| c.fail(e))?;
        Ok(Value::Bool(constraint.check(&v)))
    }),
    f("urlParse", Exact(1), |c, a| {
        super::url::parse(str_arg(&a[0])?).map_err(|e| c.fail(e))
    }),
    f("urlJoin", Exact(1), |c, a| {
        super::url::join(map_arg(&a[0])?)
            .map(string)
            .map_err(|e| c.fail(e))
    }),
];

/// `path` and `path/filepath` (the same on Linux).
pub(crate) const PATH_FUNCS: &[Func] = &[
    f("base", Exact(1), |_, a| Ok(string(base(str_arg(&a[0])?)))),
    f("dir", Exact(1), |_, a| Ok(string(dir(str_arg(&a[0])?)))),
    f("clean", Exact(1), |_, a| Ok(string(clean(str_arg(&a[0])?)))),
    f("ext", Exact(1), |_, a| Ok(string(ext(str_arg(&a[0])?)))),
    f("isAbs", Exact(1), |_, a| {
        Ok(Value::Bool(str_arg(&a[0])?.starts_with('/')))
    }),
    f("osBase", Exact(1), |_, a| Ok(string(base(str_arg(&a[0])?)))),
    f("osDir", Exact(1), |_, a| Ok(string(dir(str_arg(&a[0])?)))),
    f("osClean", Exact(1), |_, a| {
        Ok(string(clean(str_arg(&a[0])?)))
    }),
    f("osExt", Exact(1), |_, a| Ok(string(ext(str_arg(&a[0])?)))),
    f("osIsAbs", Exact(1), |_, a| {
        Ok(Value::Bool(str_arg(&a[0])?.starts_with('/')))
    }),
];

/// KWOK's golden placeholder of a call: `<name(args)>`, arguments as Go's `%#v`.
pub(crate) fn placeholder(name: &str, args: &[Value]) -> String {
    let args: Vec<String> = args.iter().map(go_sharp_v).collect();
    if args.is_empty() {
        format!("<{name}>")
    } else {
        format!("<{name}({})>", args.join(", "))
    }
}

/// Go's `%#v` of a scalar (other values with `%v`).
fn go_sharp_v(v: &Value) -> String {
    match v {
        Value::String(s) => go_quote(s),
        Value::Nil => "<nil>".to_owned(),
        other => super::conv::sprint(other),
    }
}

/// A uniform integer in `[0, n)` from the env's random source.
pub(crate) fn random_below(env: &dyn TemplateEnv, n: u64) -> u64 {
    if n == 0 {
        return 0;
    }
    // Rejection sampling: no bias whatever `n` is.
    let zone = u64::MAX - (u64::MAX % n);
    loop {
        let mut b = [0u8; 8];
        env.random_bytes(&mut b);
        let r = u64::from_le_bytes(b);
        if r < zone {
            return r % n;
        }
    }
}

/// Go's `os.Expand`: `$NAME`, `${NAME}`, `$1`/`$*`-style one-character names; `${}` and a
/// lone `${` are dropped, a `$` before anything else is kept.
fn expand(s: &str, lookup: impl Fn(&str) -> String) -> String {
    let b = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    let (mut i, mut j) = (0, 0);
    while j < b.len() {
        if b[j] == b'$' && j + 1 < b.len() {
            out.push_str(&s[i..j]);
            let (name, width) = shell_name(&s[j + 1..]);
            if name.is_empty() && width == 0 {
                out.push('$');
            } else if !name.is_empty() {
                out.push_str(&lookup(name));
            }
            j += width;
            i = j + 1;
        }
        j += 1;
    }
    out.push_str(&s[i.min(s.len())..]);
    out
}

fn shell_name(s: &str) -> (&str, usize) {
    let b = s.as_bytes();
    let special = |c: u8| b"*#$@!?-".contains(&c) || c.is_ascii_digit();
    if b[0] == b'{' {
        if b.len() > 2 && special(b[1]) && b[2] == b'}' {
            return (&s[1..2], 3);
        }
        return match s[1..].find('}') {
            Some(0) => ("", 2),
            Some(i) => (&s[1..=i], i + 2),
            None => ("", 1),
        };
    }
    if special(b[0]) {
        return (&s[..1], 1);
    }
    let n = b
        .iter()
        .take_while(|c| c.is_ascii_alphanumeric() || **c == b'_')
        .count();
    (&s[..n], n)
}

/// Go's `path.Clean`.
pub(crate) fn clean(p: &str) -> String {
    if p.is_empty() {
        return ".".to_owned();
    }
    let rooted = p.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for part in p.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.last().is_some_and(|l| *l != "..") {
                    parts.pop();
                } else if !rooted {
                    parts.push("..");
                }
            }
            other => parts.push(other),
        }
    }
    let body = parts.join("/");
    match (rooted, body.is_empty()) {
        (true, _) => format!("/{body}"),
        (false, true) => ".".to_owned(),
        (false, false) => body,
    }
}

/// Go's `path.Base`.
fn base(p: &str) -> String {
    if p.is_empty() {
        return ".".to_owned();
    }
    let trimmed = p.trim_end_matches('/');
    if trimmed.is_empty() {
        return "/".to_owned();
    }
    trimmed.rsplit('/').next().unwrap_or(trimmed).to_owned()
}

/// Go's `path.Dir`.
fn dir(p: &str) -> String {
    let cut = p.rfind('/').map_or(0, |i| i + 1);
    clean(&p[..cut])
}

/// Go's `path.Ext`.
fn ext(p: &str) -> String {
    for (i, c) in p.char_indices().rev() {
        if c == '/' {
            break;
        }
        if c == '.' {
            return p[i..].to_owned();
        }
    }
    String::new()
}

/// A dict from `(key, value)` string pairs.
pub(crate) fn string_dict(pairs: &[(&str, String)]) -> Value {
    map(pairs
        .iter()
        .map(|(k, v)| (Arc::from(*k), string(v.as_str())))
        .collect::<BTreeMap<_, _>>())
}
