//! sprig's string functions: `trim`, `upper`, `substr`, `abbrev`, `wrap`, `indent`,
//! `snakecase`, `randAlpha`, `split`, `join`, `sortAlpha`, ...
//!
//! Go indexes strings by byte: `trunc`, `substr` and `abbrev` cut at byte offsets too; a
//! cut inside a multi-byte character leaves U+FFFD where Go leaves the broken bytes.

use std::collections::BTreeMap;
use std::sync::Arc;

use gotmpl::{TemplateError as GoError, Value};

use super::conv::{int_arg, list, map, sprint, str_arg, string, strings, strslice, strval};
use super::{
    Arity::{AtLeast, Exact},
    Call, Func, f,
};
use crate::go::go_quote;

pub(crate) const FUNCS: &[Func] = &[
    f("hello", Exact(0), |_, _| Ok(string("Hello!"))),
    f("abbrev", Exact(2), |_, a| {
        let (width, s) = (int_arg(&a[0])?, str_arg(&a[1])?);
        Ok(string(if width < 4 {
            s.to_owned()
        } else {
            abbreviate_full(s, 0, width)
        }))
    }),
    f("abbrevboth", Exact(3), |_, a| {
        let (left, right, s) = (int_arg(&a[0])?, int_arg(&a[1])?, str_arg(&a[2])?);
        Ok(string(if right < 4 || left > 0 && right < 7 {
            s.to_owned()
        } else {
            abbreviate_full(s, left, right)
        }))
    }),
    f("trunc", Exact(2), |_, a| {
        let (c, s) = (int_arg(&a[0])?, str_arg(&a[1])?);
        let len = i64::try_from(s.len()).unwrap_or(i64::MAX);
        Ok(string(if c < 0 && len + c > 0 {
            bytes(s, to_usize(len + c), s.len())
        } else if c >= 0 && len > c {
            bytes(s, 0, to_usize(c))
        } else {
            s.to_owned()
        }))
    }),
    f("trim", Exact(1), |_, a| Ok(string(str_arg(&a[0])?.trim()))),
    f("upper", Exact(1), |_, a| {
        Ok(string(str_arg(&a[0])?.to_uppercase()))
    }),
    f("lower", Exact(1), |_, a| {
        Ok(string(str_arg(&a[0])?.to_lowercase()))
    }),
    f("title", Exact(1), |_, a| Ok(string(title(str_arg(&a[0])?)))),
    f("untitle", Exact(1), |_, a| {
        Ok(string(untitle(str_arg(&a[0])?)))
    }),
    f("substr", Exact(3), substr),
    f("repeat", Exact(2), |c, a| {
        let (count, s) = (int_arg(&a[0])?, str_arg(&a[1])?);
        let count = usize::try_from(count).map_err(|_| c.fail("strings: negative Repeat count"))?;
        c.charge(count.saturating_mul(s.len()))?;
        Ok(string(s.repeat(count)))
    }),
    f("trimall", Exact(2), trim_all),
    f("trimAll", Exact(2), trim_all),
    f("trimSuffix", Exact(2), |_, a| {
        let (suffix, s) = (str_arg(&a[0])?, str_arg(&a[1])?);
        Ok(string(s.strip_suffix(suffix).unwrap_or(s)))
    }),
    f("trimPrefix", Exact(2), |_, a| {
        let (prefix, s) = (str_arg(&a[0])?, str_arg(&a[1])?);
        Ok(string(s.strip_prefix(prefix).unwrap_or(s)))
    }),
    f("nospace", Exact(1), |_, a| {
        Ok(string(
            str_arg(&a[0])?
                .chars()
                .filter(|c| !c.is_whitespace())
                .collect::<String>(),
        ))
    }),
    f("initials", Exact(1), |_, a| {
        Ok(string(
            str_arg(&a[0])?
                .split(char::is_whitespace)
                .filter_map(|w| w.chars().next())
                .collect::<String>(),
        ))
    }),
    f("randAlphaNum", Exact(1), |c, a| random_string(c, a, ALNUM)),
    f("randAlpha", Exact(1), |c, a| random_string(c, a, ALPHA)),
    f("randAscii", Exact(1), |c, a| random_string(c, a, ASCII)),
    f("randNumeric", Exact(1), |c, a| random_string(c, a, DIGITS)),
    f("swapcase", Exact(1), |_, a| {
        Ok(string(swapcase(str_arg(&a[0])?)))
    }),
    f("shuffle", Exact(1), |c, a| {
        let s = str_arg(&a[0])?;
        if c.env.golden() {
            return Ok(string(super::misc::placeholder(c.name, a)));
        }
        let mut chars: Vec<char> = s.chars().collect();
        for i in (1..chars.len()).rev() {
            let j = super::misc::random_below(c.env, i as u64 + 1);
            chars.swap(i, usize::try_from(j).unwrap_or(0));
        }
        Ok(string(chars.into_iter().collect::<String>()))
    }),
    f("snakecase", Exact(1), |_, a| {
        Ok(string(words(str_arg(&a[0])?).join("_")))
    }),
    f("kebabcase", Exact(1), |_, a| {
        Ok(string(words(str_arg(&a[0])?).join("-")))
    }),
    f("camelcase", Exact(1), |_, a| {
        Ok(string(pascal(str_arg(&a[0])?)))
    }),
    f("wrap", Exact(2), |c, a| {
        let (width, s) = (int_arg(&a[0])?, str_arg(&a[1])?);
        wrapped(c, s, width, "\n", false)
    }),
    f("wrapWith", Exact(3), |c, a| {
        let (width, sep, s) = (int_arg(&a[0])?, str_arg(&a[1])?, str_arg(&a[2])?);
        wrapped(c, s, width, sep, true)
    }),
    f("contains", Exact(2), |_, a| {
        Ok(Value::Bool(str_arg(&a[1])?.contains(str_arg(&a[0])?)))
    }),
    f("hasPrefix", Exact(2), |_, a| {
        Ok(Value::Bool(str_arg(&a[1])?.starts_with(str_arg(&a[0])?)))
    }),
    f("hasSuffix", Exact(2), |_, a| {
        Ok(Value::Bool(str_arg(&a[1])?.ends_with(str_arg(&a[0])?)))
    }),
    f("quote", AtLeast(0), |c, a| {
        let out = joined(a, |v| go_quote(&strval(v)));
        c.charge(out.len())?;
        Ok(string(out))
    }),
    f("squote", AtLeast(0), |c, a| {
        let out = joined(a, |v| format!("'{}'", sprint(v)));
        c.charge(out.len())?;
        Ok(string(out))
    }),
    f("cat", AtLeast(0), |c, a| {
        let out = joined(a, sprint);
        c.charge(out.len())?;
        Ok(string(out))
    }),
    f("indent", Exact(2), |c, a| indent(c, a, false)),
    f("nindent", Exact(2), |c, a| indent(c, a, true)),
    f("replace", Exact(3), |c, a| {
        let (old, new, src) = (str_arg(&a[0])?, str_arg(&a[1])?, str_arg(&a[2])?);
        let hits = if old.is_empty() {
            src.chars().count() + 1
        } else {
            src.matches(old).count()
        };
        c.charge(src.len().saturating_add(hits.saturating_mul(new.len())))?;
        Ok(string(go_replace(src, old, new)))
    }),
    f("plural", Exact(3), |_, a| {
        let (one, many, count) = (str_arg(&a[0])?, str_arg(&a[1])?, int_arg(&a[2])?);
        Ok(string(if count == 1 { one } else { many }))
    }),
    f("split", Exact(2), |_, a| {
        let (sep, s) = (str_arg(&a[0])?, str_arg(&a[1])?);
        Ok(indexed(go_split(s, sep, -1)))
    }),
    f("splitn", Exact(3), |_, a| {
        let (sep, n, s) = (str_arg(&a[0])?, int_arg(&a[1])?, str_arg(&a[2])?);
        Ok(indexed(go_split(s, sep, n)))
    }),
    f("splitList", Exact(2), |_, a| {
        let (sep, s) = (str_arg(&a[0])?, str_arg(&a[1])?);
        Ok(strings(go_split(s, sep, -1)))
    }),
    f("join", Exact(2), |c, a| {
        let sep = str_arg(&a[0])?;
        let out = strslice(&a[1]).join(sep);
        c.charge(out.len())?;
        Ok(string(out))
    }),
    f("sortAlpha", Exact(1), |_, a| {
        Ok(match &a[0] {
            Value::List(_) => {
                let mut items = strslice(&a[0]);
                items.sort();
                strings(items)
            }
            other => list(vec![string(strval(other))]),
        })
    }),
];

const ALPHA: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
const ALNUM: &[u8] = b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
const DIGITS: &[u8] = b"0123456789";
const ASCII: &[u8] = b" !\"#$%&'()*+,-./0123456789:;<=>?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrstuvwxyz{|}~";

fn to_usize(i: i64) -> usize {
    usize::try_from(i).unwrap_or(0)
}

/// `s[from..to]` by bytes, as Go slices strings.
pub(crate) fn bytes(s: &str, from: usize, to: usize) -> String {
    let b = s.as_bytes();
    let to = to.min(b.len());
    String::from_utf8_lossy(&b[from.min(to)..to]).into_owned()
}

/// goutils' `AbbreviateFull(s, offset, width)` (width at least 4; errors give `""`).
fn abbreviate_full(s: &str, offset: i64, width: i64) -> String {
    let len = i64::try_from(s.len()).unwrap_or(i64::MAX);
    if s.is_empty() {
        return String::new();
    }
    if width < 4 {
        return String::new();
    }
    if len <= width {
        return s.to_owned();
    }
    let mut offset = offset.min(len);
    if len - offset < width - 3 {
        offset = len - (width - 3);
    }
    if offset <= 4 {
        return format!("{}...", bytes(s, 0, to_usize(width - 3)));
    }
    if width < 7 {
        return String::new();
    }
    if offset + width - 3 < len {
        let rest = bytes(s, to_usize(offset), s.len());
        return format!("...{}", abbreviate_full(&rest, 0, width - 3));
    }
    format!("...{}", bytes(s, to_usize(len - (width - 3)), s.len()))
}

fn substr(c: &Call<'_>, a: &[Value]) -> Result<Value, GoError> {
    let (start, end, s) = (int_arg(&a[0])?, int_arg(&a[1])?, str_arg(&a[2])?);
    let len = i64::try_from(s.len()).unwrap_or(i64::MAX);
    let out_of_range = |from: i64, to: i64| {
        c.fail(format!(
            "runtime error: slice bounds out of range [{from}:{to}] with length {len}"
        ))
    };
    let (from, to) = if start < 0 {
        (0, end)
    } else if end < 0 || end > len {
        (start, len)
    } else {
        (start, end)
    };
    if from < 0 || to < from || to > len {
        return Err(out_of_range(from, to));
    }
    Ok(string(bytes(s, to_usize(from), to_usize(to))))
}

fn trim_all(_: &Call<'_>, a: &[Value]) -> Result<Value, GoError> {
    let (cutset, s) = (str_arg(&a[0])?, str_arg(&a[1])?);
    Ok(string(s.trim_matches(|c| cutset.contains(c))))
}

/// `strings.Title`: the first letter of each word in title case.
fn title(s: &str) -> String {
    let mut prev = ' ';
    s.chars()
        .map(|c| {
            let at_start = is_separator(prev);
            prev = c;
            if at_start {
                c.to_uppercase().collect::<String>()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// `strings.Title`'s word separators.
fn is_separator(c: char) -> bool {
    if c.is_ascii() {
        return !(c.is_ascii_alphanumeric() || c == '_');
    }
    c.is_whitespace()
}

/// goutils' `Uncapitalize`: the first letter of each space-separated word in lower case.
fn untitle(s: &str) -> String {
    let mut next = true;
    s.chars()
        .map(|c| {
            if c.is_whitespace() {
                next = true;
                c.to_string()
            } else if next {
                next = false;
                c.to_lowercase().collect()
            } else {
                c.to_string()
            }
        })
        .collect()
}

fn swapcase(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_uppercase() {
                c.to_lowercase().collect::<String>()
            } else if c.is_lowercase() {
                c.to_uppercase().collect()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// The words of an identifier, lower-cased: split at anything but letters and digits, at
/// a lower-to-upper change, before the last capital of an acronym (`HTTPServer` is
/// `http`, `server`), and after digits followed by a capital (`Bld4Floor`).
fn words(s: &str) -> Vec<String> {
    let chars: Vec<char> = s.chars().collect();
    let mut out: Vec<String> = Vec::new();
    let mut word = String::new();
    for (i, &c) in chars.iter().enumerate() {
        if !c.is_alphanumeric() {
            if !word.is_empty() {
                out.push(std::mem::take(&mut word));
            }
            continue;
        }
        if let Some(&prev) = i.checked_sub(1).and_then(|p| chars.get(p)) {
            let next_lower = chars.get(i + 1).is_some_and(|n| n.is_lowercase());
            let boundary = c.is_uppercase()
                && (prev.is_lowercase()
                    || prev.is_numeric()
                    || (prev.is_uppercase() && next_lower));
            if boundary && !word.is_empty() {
                out.push(std::mem::take(&mut word));
            }
        }
        word.extend(c.to_lowercase());
    }
    if !word.is_empty() {
        out.push(word);
    }
    out
}

/// xstrings' `ToPascalCase`: separators (`_`, `-`, spaces) dropped, the letter after one
/// (and the first) upper-cased; leading separators are kept.
fn pascal(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let is_connector = |c: char| c == '_' || c == '-' || c.is_whitespace();
    let leading: String = s.chars().take_while(|&c| is_connector(c)).collect();
    out.push_str(&leading);
    let mut upper = true;
    for c in s[leading.len()..].chars() {
        if is_connector(c) {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

/// goutils' `WrapCustom`, by bytes as Go does.
fn wrapped(
    c: &Call<'_>,
    s: &str,
    width: i64,
    newline: &str,
    long_words: bool,
) -> Result<Value, GoError> {
    if s.is_empty() {
        return Ok(string(""));
    }
    let newline = if newline.is_empty() { "\n" } else { newline };
    let width = usize::try_from(width.max(1)).unwrap_or(usize::MAX);
    c.charge(
        s.len()
            .saturating_mul(newline.len().max(1))
            .saturating_add(s.len()),
    )?;
    let b = s.as_bytes();
    let mut out: Vec<u8> = Vec::with_capacity(s.len());
    let mut offset = 0;
    while b.len() - offset > width {
        if b[offset] == b' ' {
            offset += 1;
            continue;
        }
        let end = (width + offset + 1).min(b.len());
        let space = b[offset..end].iter().rposition(|&x| x == b' ');
        if let Some(at) = space {
            out.extend_from_slice(&b[offset..offset + at]);
            out.extend_from_slice(newline.as_bytes());
            offset += at + 1;
        } else if long_words {
            out.extend_from_slice(&b[offset..offset + width]);
            out.extend_from_slice(newline.as_bytes());
            offset += width;
        } else {
            let end = width + offset;
            match b[end..].iter().position(|&x| x == b' ') {
                None => {
                    out.extend_from_slice(&b[offset..]);
                    offset = b.len();
                }
                Some(i) => {
                    out.extend_from_slice(&b[offset..end + i]);
                    out.extend_from_slice(newline.as_bytes());
                    offset = end + i + 1;
                }
            }
        }
    }
    out.extend_from_slice(&b[offset..]);
    Ok(string(String::from_utf8_lossy(&out).into_owned()))
}

/// The non-nil values, each printed with `print`, joined by spaces.
fn joined(values: &[Value], print: impl Fn(&Value) -> String) -> String {
    values
        .iter()
        .filter(|v| !matches!(v, Value::Nil))
        .map(print)
        .collect::<Vec<_>>()
        .join(" ")
}

fn indent(c: &Call<'_>, a: &[Value], newline_first: bool) -> Result<Value, GoError> {
    let (spaces, s) = (int_arg(&a[0])?, str_arg(&a[1])?);
    let spaces = usize::try_from(spaces).map_err(|_| c.fail("strings: negative Repeat count"))?;
    let lines = s.matches('\n').count() + 1;
    c.charge(spaces.saturating_mul(lines).saturating_add(s.len()))?;
    let pad = " ".repeat(spaces);
    let body = format!("{pad}{}", s.replace('\n', &format!("\n{pad}")));
    Ok(string(if newline_first {
        format!("\n{body}")
    } else {
        body
    }))
}

/// `strings.Replace(src, old, new, -1)`: an empty `old` matches before every character
/// and at the end.
fn go_replace(src: &str, old: &str, new: &str) -> String {
    if !old.is_empty() {
        return src.replace(old, new);
    }
    let mut out = String::with_capacity(src.len() * (new.len() + 1) + new.len());
    for ch in src.chars() {
        out.push_str(new);
        out.push(ch);
    }
    out.push_str(new);
    out
}

/// `strings.SplitN(s, sep, n)` (`n < 0`: all; `n == 0`: none); an empty `sep` splits
/// between characters.
pub(crate) fn go_split(s: &str, sep: &str, n: i64) -> Vec<String> {
    if n == 0 {
        return Vec::new();
    }
    let limit = usize::try_from(n).unwrap_or(usize::MAX);
    if sep.is_empty() {
        let chars: Vec<String> = s.chars().map(String::from).collect();
        if chars.len() <= limit {
            return chars;
        }
        let head_bytes: usize = chars[..limit - 1].iter().map(String::len).sum();
        let mut out = chars[..limit - 1].to_vec();
        out.push(s[head_bytes..].to_owned());
        return out;
    }
    s.splitn(limit, sep).map(str::to_owned).collect()
}

/// sprig's `split` result: `{_0: a, _1: b}`.
fn indexed(parts: Vec<String>) -> Value {
    map(parts
        .into_iter()
        .enumerate()
        .map(|(i, p)| (Arc::from(format!("_{i}")), string(p)))
        .collect::<BTreeMap<_, _>>())
}

fn random_string(c: &Call<'_>, a: &[Value], alphabet: &[u8]) -> Result<Value, GoError> {
    let count = int_arg(&a[0])?;
    if c.env.golden() {
        return Ok(string(super::misc::placeholder(c.name, a)));
    }
    // goutils refuses a negative count; sprig prints the empty result.
    let Ok(count) = usize::try_from(count) else {
        return Ok(string(""));
    };
    c.charge(count)?;
    let len = alphabet.len() as u64;
    let out: String = (0..count)
        .map(|_| {
            let i = super::misc::random_below(c.env, len);
            char::from(alphabet[usize::try_from(i).unwrap_or(0)])
        })
        .collect();
    Ok(string(out))
}
