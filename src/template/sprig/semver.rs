//! Semantic versions and constraints as sprig reads them (Masterminds/semver v3):
//! versions may omit the minor and patch numbers and start with `v`; constraints join
//! comparisons (`=`, `!=`, `>`, `<`, `>=`, `<=`, `~`, `^`, wildcards `1.2.x`/`*`, hyphen
//! ranges `1.2 - 1.4`) with `,` or spaces (and) and `||` (or). A version with a
//! prerelease matches only comparisons that name a prerelease.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::sync::Arc;

use gotmpl::Value;

/// A parsed version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Version {
    major: u64,
    minor: u64,
    patch: u64,
    prerelease: String,
    metadata: String,
    original: String,
}

const INVALID: &str = "Invalid Semantic Version";

impl Version {
    pub(crate) fn parse(s: &str) -> Result<Self, String> {
        let body = s.strip_prefix('v').unwrap_or(s);
        let (body, metadata) = body.split_once('+').unwrap_or((body, ""));
        let (core, prerelease) = body.split_once('-').unwrap_or((body, ""));
        let ident_ok = |part: &str| {
            part.split('.').all(|id| {
                !id.is_empty() && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            })
        };
        if (!prerelease.is_empty() || body.contains('-')) && !ident_ok(prerelease)
            || (s.contains('+') && !ident_ok(metadata))
        {
            return Err(INVALID.to_owned());
        }
        let nums: Vec<&str> = core.split('.').collect();
        if nums.is_empty() || nums.len() > 3 {
            return Err(INVALID.to_owned());
        }
        let mut parsed = [0u64; 3];
        for (i, n) in nums.iter().enumerate() {
            if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
                return Err(INVALID.to_owned());
            }
            parsed[i] = n.parse().map_err(|_| INVALID.to_owned())?;
        }
        Ok(Self {
            major: parsed[0],
            minor: parsed[1],
            patch: parsed[2],
            prerelease: prerelease.to_owned(),
            metadata: metadata.to_owned(),
            original: s.to_owned(),
        })
    }

    /// The fields of Go's `*semver.Version` a template reads.
    pub(crate) fn to_value(&self) -> Value {
        let mut m = BTreeMap::new();
        let int = |n: u64| Value::Int(i64::try_from(n).unwrap_or(i64::MAX));
        m.insert(Arc::from("Major"), int(self.major));
        m.insert(Arc::from("Minor"), int(self.minor));
        m.insert(Arc::from("Patch"), int(self.patch));
        m.insert(
            Arc::from("Prerelease"),
            Value::String(self.prerelease.as_str().into()),
        );
        m.insert(
            Arc::from("Metadata"),
            Value::String(self.metadata.as_str().into()),
        );
        m.insert(
            Arc::from("Original"),
            Value::String(self.original.as_str().into()),
        );
        Value::Map(Arc::new(m))
    }

    fn cmp(&self, other: &Self) -> Ordering {
        (self.major, self.minor, self.patch)
            .cmp(&(other.major, other.minor, other.patch))
            .then_with(|| cmp_prerelease(&self.prerelease, &other.prerelease))
    }
}

fn cmp_prerelease(a: &str, b: &str) -> Ordering {
    match (a.is_empty(), b.is_empty()) {
        (true, true) => return Ordering::Equal,
        (true, false) => return Ordering::Greater,
        (false, true) => return Ordering::Less,
        _ => {}
    }
    let (mut x, mut y) = (a.split('.'), b.split('.'));
    loop {
        match (x.next(), y.next()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(p), Some(q)) => {
                let o = match (p.parse::<u64>(), q.parse::<u64>()) {
                    (Ok(m), Ok(n)) => m.cmp(&n),
                    (Ok(_), Err(_)) => Ordering::Less,
                    (Err(_), Ok(_)) => Ordering::Greater,
                    _ => p.cmp(q),
                };
                if o != Ordering::Equal {
                    return o;
                }
            }
        }
    }
}

/// One comparison: operator, version, which parts were left out or wildcards.
#[derive(Debug, Clone)]
struct Constraint {
    op: String,
    version: Version,
    minor_dirty: bool,
    patch_dirty: bool,
    any: bool,
}

impl Constraint {
    fn parse(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let op_len = s.bytes().take_while(|b| b"=!<>~^".contains(b)).count();
        let (op, rest) = s.split_at(op_len);
        let op = match op {
            "" | "=" => "=",
            "=>" => ">=",
            "=<" => "<=",
            "~>" => "~",
            o @ ("!=" | ">" | "<" | ">=" | "<=" | "~" | "^") => o,
            _ => return Err(format!("improper constraint: {s}")),
        };
        let rest = rest.trim().strip_prefix('v').unwrap_or(rest.trim());
        let (core, tail) = match rest.find(['-', '+']) {
            Some(i) => rest.split_at(i),
            None => (rest, ""),
        };
        let parts: Vec<&str> = core.split('.').collect();
        let wild = |p: Option<&&str>| p.is_none_or(|p| matches!(*p, "x" | "X" | "*"));
        let any = wild(parts.first());
        let minor_dirty = any || wild(parts.get(1));
        let patch_dirty = minor_dirty || wild(parts.get(2));
        let num = |i: usize, dirty: bool| if dirty { "0" } else { parts[i] };
        let text = format!(
            "{}.{}.{}{tail}",
            num(0, any),
            num(1, minor_dirty),
            num(2, patch_dirty)
        );
        let version = Version::parse(&text).map_err(|_| format!("improper constraint: {s}"))?;
        Ok(Self {
            op: op.to_owned(),
            version,
            minor_dirty,
            patch_dirty,
            any,
        })
    }

    fn check(&self, v: &Version) -> bool {
        let c = &self.version;
        if !v.prerelease.is_empty() && c.prerelease.is_empty() {
            return false;
        }
        let cmp = v.cmp(c);
        match self.op.as_str() {
            "=" => self.any || in_wildcard(self, v),
            "!=" => !(self.any || in_wildcard(self, v)),
            ">" => {
                if self.minor_dirty {
                    v.major > c.major
                } else if self.patch_dirty {
                    v.major > c.major || (v.major == c.major && v.minor > c.minor)
                } else {
                    cmp == Ordering::Greater
                }
            }
            "<" => cmp == Ordering::Less,
            ">=" => cmp != Ordering::Less,
            "<=" => {
                if self.minor_dirty && !self.any {
                    v.major <= c.major
                } else if self.patch_dirty && !self.any {
                    v.major < c.major || (v.major == c.major && v.minor <= c.minor)
                } else {
                    self.any || cmp != Ordering::Greater
                }
            }
            "~" => {
                cmp != Ordering::Less
                    && v.major == c.major
                    && (self.minor_dirty || v.minor == c.minor)
            }
            _ => {
                // "^"
                if cmp == Ordering::Less {
                    false
                } else if c.major > 0 || self.minor_dirty {
                    v.major == c.major
                } else if c.minor > 0 || self.patch_dirty {
                    v.major == 0 && v.minor == c.minor
                } else {
                    v.major == 0 && v.minor == 0 && v.patch == c.patch
                }
            }
        }
    }
}

/// Whether `v` is the version, or within its wildcard range.
fn in_wildcard(c: &Constraint, v: &Version) -> bool {
    let w = &c.version;
    if c.minor_dirty {
        v.major == w.major
    } else if c.patch_dirty {
        v.major == w.major && v.minor == w.minor
    } else {
        v.cmp(w) == Ordering::Equal
    }
}

/// Alternatives (`||`) of conjunctions.
#[derive(Debug, Clone)]
pub(crate) struct Constraints {
    alternatives: Vec<Vec<Constraint>>,
}

impl Constraints {
    pub(crate) fn parse(s: &str) -> Result<Self, String> {
        let mut alternatives = Vec::new();
        for alt in s.split("||") {
            let mut all = Vec::new();
            let alt = alt.trim();
            if let Some((low, high)) = alt.split_once(" - ") {
                all.push(Constraint::parse(&format!(">={}", low.trim()))?);
                all.push(Constraint::parse(&format!("<={}", high.trim()))?);
            } else {
                for part in split_conjunction(alt) {
                    all.push(Constraint::parse(&part)?);
                }
            }
            if all.is_empty() {
                return Err(format!("improper constraint: {s}"));
            }
            alternatives.push(all);
        }
        Ok(Self { alternatives })
    }

    pub(crate) fn check(&self, v: &Version) -> bool {
        self.alternatives
            .iter()
            .any(|all| all.iter().all(|c| c.check(v)))
    }
}

/// `>= 1.2, < 2` or `>= 1.2 < 2`: operators stay with their versions.
fn split_conjunction(s: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut pending_op = String::new();
    for token in s.split([',', ' ']).filter(|t| !t.is_empty()) {
        if token.bytes().all(|b| b"=!<>~^".contains(&b)) {
            pending_op.push_str(token);
        } else {
            out.push(format!("{}{token}", std::mem::take(&mut pending_op)));
        }
    }
    out
}
