//! sprig's `urlParse` and `urlJoin`, with Go's `net/url` rules (no normalisation: what
//! is not percent-encoded stays as written).

use std::collections::BTreeMap;
use std::sync::Arc;

use gotmpl::Value;

use super::misc::string_dict;

/// `url.Parse` as sprig's dict: `scheme`, `host`, `hostname`, `path` (decoded), `query`
/// (raw), `opaque`, `fragment` (decoded), `userinfo`.
pub(crate) fn parse(raw: &str) -> Result<Value, String> {
    let fail = |what: &str| {
        format!(
            "unable to parse url: parse {}: {what}",
            crate::go::go_quote(raw)
        )
    };
    let (rest, fragment) = raw.split_once('#').unwrap_or((raw, ""));
    let fragment = unescape(fragment).ok_or_else(|| fail("invalid URL escape"))?;
    let (scheme, rest) = match scheme_of(rest) {
        Ok(parts) => parts,
        Err(()) => return Err(fail("missing protocol scheme")),
    };
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    let mut fields = vec![
        ("scheme", scheme.to_ascii_lowercase()),
        ("query", query.to_owned()),
        ("fragment", fragment),
    ];
    if !scheme.is_empty() && !rest.starts_with('/') {
        fields.extend([
            ("opaque", rest.to_owned()),
            ("host", String::new()),
            ("hostname", String::new()),
            ("path", String::new()),
            ("userinfo", String::new()),
        ]);
        return Ok(string_dict(&fields));
    }
    let (authority, path) = match rest.strip_prefix("//") {
        Some(after) => after.split_at(after.find('/').unwrap_or(after.len())),
        None => ("", rest),
    };
    let (userinfo, host) = match authority.rsplit_once('@') {
        Some((u, h)) => (u, h),
        None => ("", authority),
    };
    let hostname = hostname(host);
    let path = unescape(path).ok_or_else(|| fail("invalid URL escape"))?;
    fields.extend([
        ("opaque", String::new()),
        ("host", host.to_owned()),
        ("hostname", hostname.to_owned()),
        ("path", path),
        ("userinfo", userinfo.to_owned()),
    ]);
    Ok(string_dict(&fields))
}

/// Go's `getScheme`: letters, digits, `+-.` before a `:`, starting with a letter.
fn scheme_of(s: &str) -> Result<(&str, &str), ()> {
    for (i, c) in s.char_indices() {
        match c {
            'a'..='z' | 'A'..='Z' => {}
            '0'..='9' | '+' | '-' | '.' if i > 0 => {}
            ':' if i == 0 => return Err(()),
            ':' => return Ok((&s[..i], &s[i + 1..])),
            _ => return Ok(("", s)),
        }
    }
    Ok(("", s))
}

/// `URL.Hostname()`: the host without its port and IPv6 brackets.
fn hostname(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match host.rsplit_once(':') {
        Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h,
        _ => host,
    }
}

fn unescape(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    Some(String::from_utf8_lossy(&out).into_owned())
}

/// Go's `shouldEscape` for paths (`path == true`) and fragments.
fn escape(s: &str, path: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        let keep = b.is_ascii_alphanumeric()
            || b"-_.~".contains(&b)
            || b"$&+,/:;=@".contains(&b)
            || (!path && b"!()*?".contains(&b));
        if keep {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `URL.String()` of sprig's dict (every present key must hold a string).
pub(crate) fn join(d: &Arc<BTreeMap<Arc<str>, Value>>) -> Result<String, String> {
    let get = |key: &str| -> Result<String, String> {
        match d.get(key) {
            None => Ok(String::new()),
            Some(Value::String(s)) => Ok(s.to_string()),
            Some(other) => Err(format!(
                "unable to parse {key} key, must be of type string, but {} found",
                super::conv::kind_of(other)
            )),
        }
    };
    let (scheme, host, path) = (get("scheme")?, get("host")?, get("path")?);
    let (query, opaque, fragment, userinfo) = (
        get("query")?,
        get("opaque")?,
        get("fragment")?,
        get("userinfo")?,
    );
    let mut out = String::new();
    if !opaque.is_empty() {
        out.push_str(&format!("{scheme}:{opaque}"));
    } else {
        if !scheme.is_empty() {
            out.push_str(&scheme);
            out.push(':');
        }
        let authority = !scheme.is_empty() || !host.is_empty() || !userinfo.is_empty();
        if authority && (!host.is_empty() || !path.is_empty() || !userinfo.is_empty()) {
            out.push_str("//");
        }
        if !userinfo.is_empty() {
            out.push_str(&userinfo);
            out.push('@');
        }
        out.push_str(&host);
        let escaped = escape(&path, true);
        if !escaped.is_empty() && !escaped.starts_with('/') && !host.is_empty() {
            out.push('/');
        }
        out.push_str(&escaped);
    }
    if !query.is_empty() {
        out.push('?');
        out.push_str(&query);
    }
    if !fragment.is_empty() {
        out.push('#');
        out.push_str(&escape(&fragment, false));
    }
    Ok(out)
}
