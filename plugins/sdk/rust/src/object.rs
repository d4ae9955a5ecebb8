//! Objects as JSON text, and fast lookups in JSON text.

use std::borrow::Cow;
use std::fmt;

/// A Kubernetes object as the JSON text kstage passed (`{"apiVersion": "v1", ...}`).
///
/// Nothing is parsed up front. [`get`](Object::get) and its helpers find one value by
/// scanning the text, skipping what is not on the path without decoding it, which
/// is much cheaper than building a tree for a whole Pod. [`parse`](Object::parse)
/// deserializes the object (or the parts a struct names) with serde_json, and
/// [`value`](Object::value) builds a `serde_json::Value`, when a plugin needs more.
///
/// Paths are dotted, with an optional leading dot: `.metadata.name`,
/// `status.conditions.0.type` (a number indexes an array). A key holding dots or
/// brackets is written in brackets and quotes: `.metadata.labels["app.kubernetes.io/name"]`
/// (`[0]` indexes an array too). `""` and `"."` are the object itself.
#[repr(transparent)]
pub struct Object(str);

impl Object {
    /// Wrap JSON text. The text is not checked; lookups in malformed text find
    /// nothing (or garbage), they never panic.
    pub fn new(json: &str) -> &Object {
        // SAFETY: `Object` is a `repr(transparent)` wrapper of `str`.
        unsafe { &*(json as *const str as *const Object) }
    }

    /// The JSON text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The JSON text of the value at `path` (a string keeps its quotes and escapes),
    /// or `None` when the path is missing or malformed.
    ///
    /// ```
    /// let pod = kstage_plugin::Object::new(r#"{"metadata": {"name": "web-0"}, "spec": {"nodeName": null}}"#);
    /// assert_eq!(pod.get(".metadata.name"), Some(r#""web-0""#));
    /// assert_eq!(pod.get(".spec.nodeName"), Some("null"));
    /// assert_eq!(pod.get(".status.phase"), None);
    /// ```
    pub fn get(&self, path: &str) -> Option<&str> {
        json::lookup(&self.0, path)
    }

    /// Like [`get`](Object::get), with the path given as keys (and array indexes).
    pub fn get_in<S: AsRef<str>>(&self, keys: impl IntoIterator<Item = S>) -> Option<&str> {
        json::lookup_keys(&self.0, keys)
    }

    /// The string at `path`, unescaped; `None` when missing or not a string.
    pub fn get_str(&self, path: &str) -> Option<Cow<'_, str>> {
        json::as_str(self.get(path)?)
    }

    /// `metadata.name`.
    pub fn name(&self) -> Option<Cow<'_, str>> {
        json::as_str(self.get_in(["metadata", "name"])?)
    }

    /// `metadata.namespace`.
    pub fn namespace(&self) -> Option<Cow<'_, str>> {
        json::as_str(self.get_in(["metadata", "namespace"])?)
    }

    /// The annotation `key` (`metadata.annotations[key]`), if it is a string.
    pub fn annotation(&self, key: &str) -> Option<Cow<'_, str>> {
        json::as_str(self.get_in(["metadata", "annotations", key])?)
    }

    /// The label `key` (`metadata.labels[key]`), if it is a string.
    pub fn label(&self, key: &str) -> Option<Cow<'_, str>> {
        json::as_str(self.get_in(["metadata", "labels", key])?)
    }

    /// For several lookups in this object: see [`json::Index`].
    pub fn index(&self) -> json::Index<'_> {
        json::Index::new(&self.0)
    }

    /// The object's top-level members: see [`json::members`].
    pub fn members(&self) -> json::Members<'_> {
        json::members(&self.0)
    }

    /// Deserialize the object with serde_json; a struct that names only a few fields
    /// skips the rest.
    pub fn parse<'a, T: serde::Deserialize<'a>>(&'a self) -> Result<T, serde_json::Error> {
        serde_json::from_str(&self.0)
    }

    /// The whole object as a `serde_json::Value`.
    pub fn value(&self) -> Result<serde_json::Value, serde_json::Error> {
        serde_json::from_str(&self.0)
    }
}

impl AsRef<str> for Object {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Object {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Object").field(&&self.0).finish()
    }
}

impl fmt::Display for Object {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Lookups and output helpers on JSON text, without building a tree.
///
/// They expect well-formed JSON (as kstage passes). On malformed text they return
/// `None` or copy what they find; they never panic.
pub mod json {
    use std::borrow::Cow;

    /// The JSON text of the value at `path` in `json` (see [`Object`](crate::Object)
    /// for the path syntax); `None` when the path is missing or malformed.
    pub fn lookup<'j>(json: &'j str, path: &str) -> Option<&'j str> {
        let b = json.as_bytes();
        let mut at = ws(b, 0);
        let mut rest = path.strip_prefix('.').unwrap_or(path);
        while !rest.is_empty() {
            let (key, tail) = next_segment(rest)?;
            at = descend(json, at, key)?;
            rest = tail;
        }
        json.get(at..value_end(b, at)?)
    }

    /// The JSON text of the value at the path given as keys (a key that is a number
    /// also indexes an array).
    pub fn lookup_keys<S: AsRef<str>>(
        json: &str,
        keys: impl IntoIterator<Item = S>,
    ) -> Option<&str> {
        let b = json.as_bytes();
        let mut at = ws(b, 0);
        for key in keys {
            at = descend(json, at, key.as_ref())?;
        }
        json.get(at..value_end(b, at)?)
    }

    /// The members of the JSON object `json`, in order: each key (unescaped) and the
    /// JSON text of its value. Nothing when `json` is not an object; stops at
    /// malformed text.
    ///
    /// ```
    /// use kstage_plugin::json;
    /// let labels = r#"{"app": "web", "tier": "front"}"#;
    /// let keys: Vec<_> = json::members(labels).map(|(k, _)| k).collect();
    /// assert_eq!(keys, ["app", "tier"]);
    /// ```
    pub fn members(json: &str) -> Members<'_> {
        let b = json.as_bytes();
        let at = ws(b, 0);
        let state = if b.get(at) == Some(&b'{') {
            State::First
        } else {
            State::Done
        };
        Members {
            json,
            at: at + 1,
            state,
        }
    }

    /// The iterator of [`members`].
    #[derive(Clone, Debug)]
    pub struct Members<'j> {
        json: &'j str,
        at: usize,
        state: State,
    }

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum State {
        First,
        Next,
        Done,
    }

    impl<'j> Iterator for Members<'j> {
        type Item = (Cow<'j, str>, &'j str);

        fn next(&mut self) -> Option<Self::Item> {
            let b = self.json.as_bytes();
            let mut i = ws(b, self.at);
            let state = std::mem::replace(&mut self.state, State::Done);
            match (state, b.get(i)) {
                (State::Done, _) | (_, None | Some(b'}')) => return None,
                (State::Next, Some(b',')) => i = ws(b, i + 1),
                (State::Next, _) => return None,
                (State::First, _) => {}
            }
            if b.get(i) != Some(&b'"') {
                return None;
            }
            let key_end = string_end(b, i)?;
            let key = as_str(self.json.get(i..key_end)?)?;
            i = ws(b, key_end);
            if b.get(i) != Some(&b':') {
                return None;
            }
            i = ws(b, i + 1);
            let end = value_end(b, i)?;
            let value = self.json.get(i..end)?;
            self.at = end;
            self.state = State::Next;
            Some((key, value))
        }
    }

    /// Lookups of several paths in one object: the object's top-level members are
    /// remembered as the lookups pass them, so each later lookup starts at its
    /// member instead of scanning the object again. Worth it from the second lookup
    /// that goes past a big member (a Pod's `metadata.managedFields`, say).
    ///
    /// ```
    /// let pod = r#"{"metadata": {"name": "web-0"}, "spec": {"nodeName": "n1"}}"#;
    /// let mut index = kstage_plugin::json::Index::new(pod);
    /// assert_eq!(index.get(".spec.nodeName"), Some(r#""n1""#));
    /// assert_eq!(index.get(".metadata.name"), Some(r#""web-0""#));
    /// assert_eq!(index.get(".status"), None);
    /// ```
    #[derive(Clone, Debug)]
    pub struct Index<'j> {
        json: &'j str,
        seen: Vec<(Cow<'j, str>, &'j str)>,
        /// The members not seen yet; `None` when `json` is not an object.
        rest: Option<Members<'j>>,
    }

    impl<'j> Index<'j> {
        /// An index of `json` (nothing is scanned yet).
        pub fn new(json: &'j str) -> Self {
            let rest = members(json);
            let is_object = rest.state != State::Done;
            Index {
                json,
                seen: Vec::new(),
                rest: is_object.then_some(rest),
            }
        }

        /// The same as [`lookup`]`(json, path)`.
        pub fn get(&mut self, path: &str) -> Option<&'j str> {
            let path = path.strip_prefix('.').unwrap_or(path);
            let Some(rest) = self.rest.as_mut() else {
                return lookup(self.json, path);
            };
            if path.is_empty() {
                return lookup(self.json, path);
            }
            let (first, tail) = next_segment(path)?;
            let value = match self.seen.iter().find(|(k, _)| k == first) {
                Some(&(_, v)) => v,
                None => loop {
                    let (k, v) = rest.next()?;
                    let hit = k == first;
                    self.seen.push((k, v));
                    if hit {
                        break v;
                    }
                },
            };
            lookup(value, tail)
        }
    }

    /// Checks a path's syntax: `Err` names what is wrong.
    pub fn check_path(path: &str) -> Result<(), String> {
        let mut rest = path.strip_prefix('.').unwrap_or(path);
        while !rest.is_empty() {
            match next_segment(rest) {
                Some((_, tail)) => rest = tail,
                None => return Err(format!("malformed path {path:?} at {rest:?}")),
            }
        }
        Ok(())
    }

    /// The string that the JSON text `raw` holds, unescaped; `None` if `raw` is not a
    /// JSON string. Borrows when there is nothing to unescape.
    pub fn as_str(raw: &str) -> Option<Cow<'_, str>> {
        let inner = raw.strip_prefix('"')?.strip_suffix('"')?;
        if !inner.contains('\\') {
            return Some(Cow::Borrowed(inner));
        }
        serde_json::from_str::<String>(raw).ok().map(Cow::Owned)
    }

    /// Append the JSON value `raw` to `out` without the whitespace between tokens.
    pub fn push_compact(out: &mut String, raw: &str) {
        let b = raw.as_bytes();
        let (mut start, mut i) = (0, 0);
        while i < b.len() {
            match b[i] {
                b'"' => i = string_end(b, i).unwrap_or(b.len()),
                b' ' | b'\t' | b'\n' | b'\r' => {
                    out.push_str(&raw[start..i]);
                    i += 1;
                    start = i;
                }
                _ => i += 1,
            }
        }
        out.push_str(&raw[start..]);
    }

    /// Append `s` to `out` as a JSON string literal (quoted and escaped).
    pub fn push_string(out: &mut String, s: &str) {
        out.push('"');
        let b = s.as_bytes();
        let mut start = 0;
        for (i, &c) in b.iter().enumerate() {
            let escape: &str = match c {
                b'"' => "\\\"",
                b'\\' => "\\\\",
                b'\n' => "\\n",
                b'\r' => "\\r",
                b'\t' => "\\t",
                0x08 => "\\b",
                0x0c => "\\f",
                0..=0x1f => "",
                _ => continue,
            };
            out.push_str(&s[start..i]);
            if escape.is_empty() {
                const HEX: &[u8; 16] = b"0123456789abcdef";
                out.push_str("\\u00");
                out.push(HEX[usize::from(c >> 4)] as char);
                out.push(HEX[usize::from(c & 0xf)] as char);
            } else {
                out.push_str(escape);
            }
            start = i + 1;
        }
        out.push_str(&s[start..]);
        out.push('"');
    }

    /// The first segment of a path (without its leading dot) and the rest, which is
    /// empty or starts at the next segment's `.` or `[`... with the dot removed.
    fn next_segment(path: &str) -> Option<(&str, &str)> {
        let (key, tail) = if let Some(inner) = path.strip_prefix("[\"") {
            let end = inner.find("\"]")?;
            (&inner[..end], &inner[end + 2..])
        } else if let Some(inner) = path.strip_prefix('[') {
            let end = inner.find(']')?;
            let index = &inner[..end];
            if index.is_empty() || !index.bytes().all(|c| c.is_ascii_digit()) {
                return None;
            }
            (index, &inner[end + 1..])
        } else {
            let end = path.find(['.', '[']).unwrap_or(path.len());
            if end == 0 {
                return None;
            }
            (&path[..end], &path[end..])
        };
        let tail = match tail.as_bytes().first() {
            None => tail,
            Some(b'.') if tail.len() > 1 && !tail[1..].starts_with(['.', '[']) => &tail[1..],
            Some(b'[') => tail,
            Some(_) => return None,
        };
        Some((key, tail))
    }

    /// From the value starting at `at`, the start of its member `key` (an object) or
    /// element `key` (an array, when `key` is a number).
    #[inline]
    fn descend(json: &str, at: usize, key: &str) -> Option<usize> {
        let b = json.as_bytes();
        match *b.get(at)? {
            b'{' => member(json, at, key),
            b'[' => {
                if key.is_empty() || !key.bytes().all(|c| c.is_ascii_digit()) {
                    return None;
                }
                element(b, at, key.parse().ok()?)
            }
            _ => None,
        }
    }

    fn member(json: &str, open: usize, key: &str) -> Option<usize> {
        let b = json.as_bytes();
        let mut i = ws(b, open + 1);
        if *b.get(i)? == b'}' {
            return None;
        }
        loop {
            if *b.get(i)? != b'"' {
                return None;
            }
            let end = string_end(b, i)?;
            let raw = &b[i + 1..end - 1];
            let hit = if raw.contains(&b'\\') {
                as_str(json.get(i..end)?).is_some_and(|k| k == key)
            } else {
                raw == key.as_bytes()
            };
            i = ws(b, end);
            if *b.get(i)? != b':' {
                return None;
            }
            i = ws(b, i + 1);
            if hit {
                return Some(i);
            }
            i = ws(b, value_end(b, i)?);
            if *b.get(i)? != b',' {
                return None;
            }
            i = ws(b, i + 1);
        }
    }

    fn element(b: &[u8], open: usize, index: usize) -> Option<usize> {
        let mut i = ws(b, open + 1);
        if *b.get(i)? == b']' {
            return None;
        }
        for _ in 0..index {
            i = ws(b, value_end(b, i)?);
            if *b.get(i)? != b',' {
                return None;
            }
            i = ws(b, i + 1);
        }
        Some(i)
    }

    #[inline]
    fn ws(b: &[u8], mut i: usize) -> usize {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = b.get(i) {
            i += 1;
        }
        i
    }

    /// `b[open]` is `"`: the index just past the closing quote.
    #[inline]
    fn string_end(b: &[u8], open: usize) -> Option<usize> {
        let mut i = open + 1;
        loop {
            i = next_quote_or_backslash(b, i);
            match *b.get(i)? {
                b'"' => return Some(i + 1),
                b'\\' => i += 2,
                _ => i += 1,
            }
        }
    }

    const LO: u64 = 0x0101_0101_0101_0101;
    const HI: u64 = 0x8080_8080_8080_8080;

    /// The high bit of each byte of `w` that equals `c`. The lowest flagged byte is
    /// exact; bytes above it may be flagged wrongly (borrows), so only the lowest
    /// flag of a mask (or of several masks or-ed) is used.
    #[inline(always)]
    fn bytes_equal(w: u64, c: u8) -> u64 {
        let x = w ^ (LO * u64::from(c));
        x.wrapping_sub(LO) & !x & HI
    }

    /// The index of the first byte at or after `i` that `hits` flags in its 8-byte
    /// word, or `b.len()`. Eight bytes at a time (64-bit integers are native in
    /// WebAssembly): most of an object's text is in strings, and skipping them is
    /// where lookups spend their time.
    #[inline(always)]
    fn find(b: &[u8], mut i: usize, hits: impl Fn(u64) -> u64) -> usize {
        while let Some(chunk) = b.get(i..i + 8) {
            let w = u64::from_le_bytes(chunk.try_into().unwrap_or([0; 8]));
            let m = hits(w);
            if m != 0 {
                return i + (m.trailing_zeros() / 8) as usize;
            }
            i += 8;
        }
        let mut tail = [b' '; 8];
        let rest = b.get(i..).unwrap_or_default();
        tail[..rest.len()].copy_from_slice(rest);
        let m = hits(u64::from_le_bytes(tail));
        if m != 0 {
            (i + (m.trailing_zeros() / 8) as usize).min(b.len())
        } else {
            b.len()
        }
    }

    /// The first `"` or `\\` at or after `i`.
    #[inline]
    fn next_quote_or_backslash(b: &[u8], i: usize) -> usize {
        find(b, i, |w| bytes_equal(w, b'"') | bytes_equal(w, b'\\'))
    }

    static STRUCTURAL: [bool; 256] = {
        let mut t = [false; 256];
        t[b'"' as usize] = true;
        t[b'{' as usize] = true;
        t[b'[' as usize] = true;
        t[b'}' as usize] = true;
        t[b']' as usize] = true;
        t
    };

    /// The index just past the value starting at `at`.
    fn value_end(b: &[u8], at: usize) -> Option<usize> {
        match *b.get(at)? {
            b'"' => string_end(b, at),
            b'{' | b'[' => {
                let mut depth = 0usize;
                let mut i = at;
                loop {
                    // Byte by byte: between strings the tokens are short, and a
                    // word-at-a-time search costs more than it saves there.
                    while let Some(&c) = b.get(i) {
                        if STRUCTURAL[usize::from(c)] {
                            break;
                        }
                        i += 1;
                    }
                    match *b.get(i)? {
                        b'"' => i = string_end(b, i)?,
                        b'{' | b'[' => {
                            depth += 1;
                            i += 1;
                        }
                        _ => {
                            depth -= 1;
                            i += 1;
                            if depth == 0 {
                                return Some(i);
                            }
                        }
                    }
                }
            }
            b',' | b'}' | b']' | b':' => None,
            _ => {
                let mut i = at;
                while let Some(&c) = b.get(i) {
                    if matches!(c, b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r') {
                        break;
                    }
                    i += 1;
                }
                Some(i)
            }
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        const POD: &str = r#"{ "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-0", "annotations": {"a.b/c": "x\"y", "n": "1"},
                         "labels": {"app.kubernetes.io/name": "web"}, "we\u0069rd": 1},
            "spec": {"containers": [{"name": "a", "ports": [1, 2]}, {"name": "b"}]},
            "status": {"conditions": [ {"type": "Ready", "status": "True"} ], "empty": [], "o": {}} }"#;

        #[test]
        fn lookups() {
            assert_eq!(lookup(POD, ".metadata.name"), Some("\"web-0\""));
            assert_eq!(lookup(POD, "metadata.name"), Some("\"web-0\""));
            assert_eq!(lookup(POD, ".spec.containers.1.name"), Some("\"b\""));
            assert_eq!(lookup(POD, ".spec.containers[0].ports[1]"), Some("2"));
            assert_eq!(lookup(POD, ".spec.containers.0.ports"), Some("[1, 2]"));
            assert_eq!(lookup(POD, ".status.conditions.0.type"), Some("\"Ready\""));
            assert_eq!(
                lookup(POD, r#".metadata.labels["app.kubernetes.io/name"]"#),
                Some("\"web\"")
            );
            assert_eq!(
                lookup(POD, r#".metadata["annotations"]["a.b/c"]"#),
                Some(r#""x\"y""#)
            );
            assert_eq!(lookup(POD, ".metadata.weird"), Some("1"));
            assert_eq!(lookup(POD, ".status.empty.0"), None);
            assert_eq!(lookup(POD, ".status.o.x"), None);
            assert_eq!(lookup(POD, ".spec.containers.2"), None);
            assert_eq!(lookup(POD, ".spec.containers.x"), None);
            assert_eq!(lookup(POD, ".kind.x"), None);
            assert_eq!(lookup(POD, ".nope"), None);
            assert_eq!(lookup("[1]", "."), Some("[1]"));
            assert_eq!(lookup(" 12 ", ""), Some("12"));
            assert_eq!(
                lookup_keys(POD, ["metadata", "annotations", "a.b/c"]),
                Some(r#""x\"y""#)
            );
        }

        #[test]
        fn malformed_paths_and_text() {
            for path in ["..a", ".a.", ".a[", ".a[x]", "[\"a", ".a..b"] {
                assert_eq!(lookup(POD, path), None, "{path}");
                assert!(check_path(path).is_err(), "{path}");
            }
            for text in [
                "",
                "{",
                "{\"a\"",
                "{\"a\":",
                "{\"a\": [1,",
                "\"abc",
                "{\"a\" 1}",
            ] {
                // Nothing to find, or a truncated value; never a panic.
                let _ = lookup(text, ".a.0");
                let _ = lookup(text, ".a");
                let _ = lookup(text, ".a.b.c");
            }
            assert_eq!(lookup("{\"a\": [1,", ".a.1"), None);
            assert_eq!(lookup("{\"a\" 1}", ".a"), None);
        }

        #[test]
        fn string_ends_at_every_offset() {
            // Quotes and backslashes at every position around the 8-byte chunks.
            for len in 0..40 {
                for at in 0..len {
                    for special in [b'"', b'\\'] {
                        let mut text = vec![b'x'; len];
                        text[at] = special;
                        let naive = text.iter().position(|&c| c == b'"' || c == b'\\');
                        assert_eq!(next_quote_or_backslash(&text, 0), naive.unwrap_or(len));
                    }
                }
                let text = vec![b'\xe9'; len];
                assert_eq!(next_quote_or_backslash(&text, 0), len);
            }
            let long = format!(
                "{{\"k\": \"{}\\\"{}\", \"n\": 1}}",
                "a".repeat(37),
                "b".repeat(21)
            );
            assert_eq!(lookup(&long, ".n"), Some("1"));
            assert_eq!(
                as_str(lookup(&long, ".k").unwrap()).unwrap().len(),
                37 + 1 + 21
            );
        }

        #[test]
        fn members_and_index() {
            let got: Vec<_> = members(POD)
                .map(|(k, v)| (k.into_owned(), v.len()))
                .collect();
            let keys: Vec<_> = got.iter().map(|(k, _)| k.as_str()).collect();
            assert_eq!(keys, ["apiVersion", "kind", "metadata", "spec", "status"]);
            let meta: Vec<_> = members(lookup(POD, ".metadata").unwrap())
                .map(|(k, _)| k)
                .collect();
            assert_eq!(meta, ["name", "annotations", "labels", "weird"]);
            assert_eq!(members("[1]").count(), 0);
            assert_eq!(members("{}").count(), 0);
            assert_eq!(members("{\"a\": 1,").count(), 1);
            let paths = [
                ".status.conditions.0.type",
                ".metadata.name",
                ".spec.containers[0].ports[1]",
                ".kind",
                ".nope",
                "",
                ".",
                ".metadata.weird",
                ".status.o.x",
                ".a..b",
                r#".metadata.labels["app.kubernetes.io/name"]"#,
            ];
            let mut index = Index::new(POD);
            for path in paths.iter().chain(paths.iter().rev()) {
                assert_eq!(index.get(path), lookup(POD, path), "{path}");
            }
            let mut index = Index::new("[10, 20]");
            assert_eq!(index.get(".1"), Some("20"));
        }

        #[test]
        fn strings() {
            assert_eq!(as_str("\"abc\""), Some(Cow::Borrowed("abc")));
            assert_eq!(as_str(r#""a\"b\u00e9""#).as_deref(), Some("a\"bé"));
            assert_eq!(as_str("12"), None);
            let mut out = String::new();
            push_string(&mut out, "a\"b\\c\nd\u{1}é");
            assert_eq!(out, r#""a\"b\\c\nd\u0001é""#);
            assert_eq!(
                serde_json::from_str::<String>(&out).unwrap(),
                "a\"b\\c\nd\u{1}é"
            );
            let mut out = String::new();
            push_compact(&mut out, "{ \"a b\" : [1, 2],\n \"c\": \" x \" }");
            assert_eq!(out, r#"{"a b":[1,2],"c":" x "}"#);
        }
    }
}
