//! Writing YAML: a port of the parts of libyaml's emitter go-yaml v2 uses for block output
//! (style choice, quoting, literal blocks, folding at 80 columns, key order).

use std::fmt::Write as _;

use serde_json::{Map, Number, Value};

use super::scalar::{Scalar, is_base60_float, resolve_plain};
use crate::go::{FloatVerb, go_format_float};

/// See [`super::to_string`].
pub(super) fn to_string(value: &Value) -> String {
    let mut w = Emitter {
        out: String::new(),
        column: 0,
        whitespace: true,
        indention: true,
    };
    match value {
        Value::Object(map) if !map.is_empty() => w.mapping(map, 0),
        Value::Array(items) if !items.is_empty() => w.sequence(items, 0),
        _ => w.node(value, -1, false),
    }
    if !w.out.ends_with('\n') {
        w.out.push('\n');
    }
    w.out
}

const BEST_INDENT: i64 = 2;
const BEST_WIDTH: usize = 80;

/// A port of the parts of libyaml's emitter go-yaml v2 uses for block output.
struct Emitter {
    out: String,
    column: usize,
    /// The last character written is whitespace (or the line is empty).
    whitespace: bool,
    /// Only indentation and indicators are on the current line so far.
    indention: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Style {
    Plain,
    Single,
    Double,
    Literal,
}

impl Emitter {
    fn put(&mut self, c: char) {
        self.out.push(c);
        self.column += 1;
    }

    fn put_break(&mut self) {
        self.out.push('\n');
        self.column = 0;
    }

    fn write_indent(&mut self, indent: i64) {
        let indent = usize::try_from(indent).unwrap_or(0);
        if !self.indention || self.column > indent || (self.column == indent && !self.whitespace) {
            self.put_break();
        }
        while self.column < indent {
            self.put(' ');
        }
        self.whitespace = true;
        self.indention = true;
    }

    fn write_indicator(&mut self, indicator: &str, need_whitespace: bool, is_whitespace: bool) {
        if need_whitespace && !self.whitespace {
            self.put(' ');
        }
        for c in indicator.chars() {
            self.put(c);
        }
        self.whitespace = is_whitespace;
        self.indention = false;
    }

    /// A block mapping whose keys sit at column `indent`.
    fn mapping(&mut self, map: &Map<String, Value>, indent: i64) {
        for key in sorted_keys(map) {
            let Some(value) = map.get(key) else {
                continue;
            };
            self.write_indent(indent);
            // libyaml writes keys longer than 128 bytes or with line breaks as `? key`.
            let simple = key.len() <= 128 && !key.contains(is_break);
            if simple {
                self.string_scalar(key, indent + BEST_INDENT, true);
                self.write_indicator(":", false, false);
            } else {
                self.write_indicator("?", true, false);
                self.indention = true;
                self.string_scalar(key, indent + BEST_INDENT, false);
                self.write_indent(indent);
                self.write_indicator(":", true, false);
                self.indention = true;
            }
            match value {
                Value::Object(m) if !m.is_empty() => self.mapping(m, indent + BEST_INDENT),
                // Sequences in mappings are "indentless" (unless after a `? key`).
                Value::Array(items) if !items.is_empty() => {
                    let seq_indent = if simple { indent } else { indent + BEST_INDENT };
                    self.sequence(items, seq_indent);
                }
                _ => self.node(value, indent, false),
            }
        }
    }

    /// A block sequence whose `-` sit at column `indent`.
    fn sequence(&mut self, items: &[Value], indent: i64) {
        for item in items {
            self.write_indent(indent);
            self.write_indicator("-", true, false);
            self.indention = true;
            match item {
                Value::Object(m) if !m.is_empty() => self.mapping(m, indent + BEST_INDENT),
                Value::Array(inner) if !inner.is_empty() => {
                    self.sequence(inner, indent + BEST_INDENT);
                }
                _ => self.node(item, indent, false),
            }
        }
    }

    /// A scalar or an empty collection inside a collection at `parent_indent`.
    fn node(&mut self, value: &Value, parent_indent: i64, simple_key: bool) {
        let indent = if parent_indent < 0 {
            BEST_INDENT
        } else {
            parent_indent + BEST_INDENT
        };
        match value {
            Value::Object(_) => self.write_indicator("{}", true, false),
            Value::Array(_) => self.write_indicator("[]", true, false),
            Value::Null => self.plain("null", indent, false),
            Value::Bool(b) => self.plain(if *b { "true" } else { "false" }, indent, false),
            Value::Number(n) => self.plain(&number_text(n), indent, false),
            Value::String(s) => self.string_scalar(s, indent, simple_key),
        }
    }

    fn string_scalar(&mut self, s: &str, indent: i64, simple_key: bool) {
        match select_style(s, simple_key) {
            Style::Plain => self.plain(s, indent, !simple_key),
            Style::Single => self.single_quoted(s, indent, !simple_key),
            Style::Double => self.double_quoted(s, indent, !simple_key),
            Style::Literal => self.literal(s, indent),
        }
    }

    fn plain(&mut self, s: &str, indent: i64, allow_breaks: bool) {
        if !self.whitespace {
            self.put(' ');
        }
        let chars: Vec<char> = s.chars().collect();
        let mut spaces = false;
        for (i, &c) in chars.iter().enumerate() {
            if c == ' ' {
                let next_space = chars.get(i + 1) == Some(&' ');
                if allow_breaks && !spaces && self.column > BEST_WIDTH && !next_space {
                    self.write_indent(indent);
                } else {
                    self.put(c);
                }
                spaces = true;
            } else {
                self.put(c);
                spaces = false;
            }
        }
        self.whitespace = false;
        self.indention = false;
    }

    fn single_quoted(&mut self, s: &str, indent: i64, allow_breaks: bool) {
        self.write_indicator("'", true, false);
        let chars: Vec<char> = s.chars().collect();
        let mut spaces = false;
        for (i, &c) in chars.iter().enumerate() {
            if c == ' ' {
                let next_space = chars.get(i + 1) == Some(&' ');
                if allow_breaks
                    && !spaces
                    && self.column > BEST_WIDTH
                    && i > 0
                    && i + 1 < chars.len()
                    && !next_space
                {
                    self.write_indent(indent);
                } else {
                    self.put(c);
                }
                spaces = true;
            } else {
                if c == '\'' {
                    self.put('\'');
                }
                self.put(c);
                self.indention = false;
                spaces = false;
            }
        }
        self.write_indicator("'", false, false);
    }

    fn double_quoted(&mut self, s: &str, indent: i64, allow_breaks: bool) {
        self.write_indicator("\"", true, false);
        let chars: Vec<char> = s.chars().collect();
        let mut spaces = false;
        for (i, &c) in chars.iter().enumerate() {
            if needs_escape(c) {
                self.put('\\');
                match c {
                    '\0' => self.put('0'),
                    '\u{7}' => self.put('a'),
                    '\u{8}' => self.put('b'),
                    '\t' => self.put('t'),
                    '\n' => self.put('n'),
                    '\u{b}' => self.put('v'),
                    '\u{c}' => self.put('f'),
                    '\r' => self.put('r'),
                    '\u{1b}' => self.put('e'),
                    '"' => self.put('"'),
                    '\\' => self.put('\\'),
                    '\u{85}' => self.put('N'),
                    '\u{a0}' => self.put('_'),
                    '\u{2028}' => self.put('L'),
                    '\u{2029}' => self.put('P'),
                    _ => {
                        let v = u32::from(c);
                        let (prefix, width) = if v <= 0xFF {
                            ('x', 2)
                        } else if v <= 0xFFFF {
                            ('u', 4)
                        } else {
                            ('U', 8)
                        };
                        self.put(prefix);
                        for k in (0..width).rev() {
                            let digit = (v >> (k * 4)) & 0xF;
                            let d = char::from_digit(digit, 16).unwrap_or('0');
                            self.put(d.to_ascii_uppercase());
                        }
                    }
                }
                spaces = false;
            } else if c == ' ' {
                if allow_breaks
                    && !spaces
                    && self.column > BEST_WIDTH
                    && i > 0
                    && i + 1 < chars.len()
                {
                    self.write_indent(indent);
                    if chars.get(i + 1) == Some(&' ') {
                        self.put('\\');
                    }
                } else {
                    self.put(c);
                }
                spaces = true;
            } else {
                self.put(c);
                spaces = false;
            }
        }
        self.write_indicator("\"", false, false);
    }

    fn literal(&mut self, s: &str, indent: i64) {
        self.write_indicator("|", true, false);
        let chars: Vec<char> = s.chars().collect();
        if chars.first().is_some_and(|c| *c == ' ' || is_break(*c)) {
            // An explicit indentation indicator when the text starts with a space.
            let _ = write!(self.out, "{BEST_INDENT}");
            self.column += 1;
        }
        let chomp = match chars.as_slice() {
            [] => Some('-'),
            [.., last] if !is_break(*last) => Some('-'),
            [_] => Some('+'),
            [.., before, _] if is_break(*before) => Some('+'),
            _ => None,
        };
        if let Some(c) = chomp {
            self.put(c);
        }
        self.put_break();
        self.indention = true;
        self.whitespace = true;
        let mut breaks = true;
        for c in chars {
            if is_break(c) {
                self.put_break();
                self.indention = true;
                breaks = true;
            } else {
                if breaks {
                    self.write_indent(indent);
                    breaks = false;
                }
                self.put(c);
                self.indention = false;
            }
        }
    }
}

fn number_text(n: &Number) -> String {
    if let Some(i) = n.as_i64() {
        return i.to_string();
    }
    if let Some(u) = n.as_u64() {
        return u.to_string();
    }
    let f = n.as_f64().unwrap_or(0.0);
    // Go's JSON encoder prints integral floats as integers, which go-yaml reads as ints.
    const LIMIT: f64 = 9_223_372_036_854_775_808.0;
    if f.fract() == 0.0 && f.abs() < LIMIT {
        #[allow(clippy::cast_possible_truncation)]
        return (f as i64).to_string();
    }
    go_format_float(f, FloatVerb::G, false)
}

fn is_break(c: char) -> bool {
    matches!(c, '\r' | '\n' | '\u{85}' | '\u{2028}' | '\u{2029}')
}

/// libyaml's `is_printable` with `unicode` on.
fn is_printable(c: char) -> bool {
    match c {
        '\n' => true,
        '\u{20}'..='\u{7E}' => true,
        '\u{A0}'..='\u{D7FF}' => true,
        '\u{E000}'..='\u{FFFD}' => c != '\u{FEFF}',
        _ => false,
    }
}

fn needs_escape(c: char) -> bool {
    !is_printable(c) || c == '\u{FEFF}' || is_break(c) || c == '"' || c == '\\'
}

/// What libyaml's `yaml_emitter_analyze_scalar` decides about a string (block context).
struct Analysis {
    block_plain_allowed: bool,
    single_quoted_allowed: bool,
    block_allowed: bool,
}

fn analyze(s: &str) -> Analysis {
    if s.is_empty() {
        return Analysis {
            block_plain_allowed: true,
            single_quoted_allowed: true,
            block_allowed: false,
        };
    }
    let chars: Vec<char> = s.chars().collect();
    let is_blankz = |i: usize| {
        chars
            .get(i)
            .is_none_or(|c| *c == ' ' || *c == '\t' || is_break(*c))
    };
    let mut block_indicators = s.starts_with("---") || s.starts_with("...");
    let mut special = false;
    let (mut line_breaks, mut leading_space, mut leading_break) = (false, false, false);
    let (mut trailing_space, mut trailing_break) = (false, false);
    let (mut break_space, mut space_break) = (false, false);
    let (mut previous_space, mut previous_break) = (false, false);
    let mut preceded_by_whitespace = true;
    for (i, &c) in chars.iter().enumerate() {
        let followed_by_whitespace = is_blankz(i + 1);
        if i == 0 {
            match c {
                '#' | ',' | '[' | ']' | '{' | '}' | '&' | '*' | '!' | '|' | '>' | '\'' | '"'
                | '%' | '@' | '`' => block_indicators = true,
                '?' | ':' | '-' if followed_by_whitespace => block_indicators = true,
                _ => {}
            }
        } else {
            match c {
                ':' if followed_by_whitespace => block_indicators = true,
                '#' if preceded_by_whitespace => block_indicators = true,
                _ => {}
            }
        }
        if !is_printable(c) || c == '\u{FEFF}' {
            special = true;
        }
        let last = i + 1 == chars.len();
        if c == ' ' {
            leading_space |= i == 0;
            trailing_space |= last;
            break_space |= previous_break;
            previous_space = true;
            previous_break = false;
        } else if is_break(c) {
            line_breaks = true;
            leading_break |= i == 0;
            trailing_break |= last;
            space_break |= previous_space;
            previous_space = false;
            previous_break = true;
        } else {
            previous_space = false;
            previous_break = false;
        }
        preceded_by_whitespace = is_blankz(i);
    }
    let mut a = Analysis {
        block_plain_allowed: true,
        single_quoted_allowed: true,
        block_allowed: true,
    };
    if leading_space || leading_break || trailing_space || trailing_break {
        a.block_plain_allowed = false;
    }
    if trailing_space {
        a.block_allowed = false;
    }
    if break_space {
        a.block_plain_allowed = false;
        a.single_quoted_allowed = false;
    }
    if space_break || special {
        a.block_plain_allowed = false;
        a.single_quoted_allowed = false;
        a.block_allowed = false;
    }
    if line_breaks || block_indicators {
        a.block_plain_allowed = false;
    }
    a
}

/// go-yaml v2's `stringv` choice, then libyaml's `select_scalar_style`.
fn select_style(s: &str, simple_key: bool) -> Style {
    // Beyond go-yaml: NEL/LS/PS are line breaks to YAML 1.1 but content to YAML 1.2
    // parsers, and a plain `<<` reads back as a merge key; escape or quote them.
    if s.contains(['\u{85}', '\u{2028}', '\u{2029}']) || s == "<<" {
        return Style::Double;
    }
    let requested = if s.contains('\n') {
        Style::Literal
    } else if matches!(resolve_plain(s), Scalar::Str) && !is_base60_float(s) {
        Style::Plain
    } else {
        Style::Double
    };
    let a = analyze(s);
    let mut style = requested;
    if style == Style::Plain && !a.block_plain_allowed {
        style = Style::Single;
    }
    if style == Style::Single && !a.single_quoted_allowed {
        style = Style::Double;
    }
    if style == Style::Literal && (!a.block_allowed || simple_key) {
        style = Style::Double;
    }
    style
}

/// Map keys in go-yaml v2's order (letters after other characters, digit runs compared
/// numerically), by a stable merge sort that never panics whatever the comparison does.
fn sorted_keys(map: &Map<String, Value>) -> Vec<&str> {
    let keys: Vec<&str> = map.keys().map(String::as_str).collect();
    let chars: Vec<Vec<char>> = keys.iter().map(|k| k.chars().collect()).collect();
    let mut order: Vec<usize> = (0..keys.len()).collect();
    merge_sort(&mut order, &|a, b| v2_key_less(&chars[a], &chars[b]));
    order.into_iter().map(|i| keys[i]).collect()
}

fn merge_sort(items: &mut Vec<usize>, less: &dyn Fn(usize, usize) -> bool) {
    if items.len() <= 1 {
        return;
    }
    let mut right = items.split_off(items.len() / 2);
    merge_sort(items, less);
    merge_sort(&mut right, less);
    let left = std::mem::take(items);
    let (mut l, mut r) = (left.into_iter().peekable(), right.into_iter().peekable());
    while let (Some(&a), Some(&b)) = (l.peek(), r.peek()) {
        if less(b, a) {
            items.push(b);
            r.next();
        } else {
            items.push(a);
            l.next();
        }
    }
    items.extend(l);
    items.extend(r);
}

fn go_is_digit(c: char) -> bool {
    c.is_ascii_digit() || (!c.is_ascii() && c.is_numeric())
}

/// go-yaml v2's `keyList.Less` for two string keys.
fn v2_key_less(a: &[char], b: &[char]) -> bool {
    for i in 0..a.len().min(b.len()) {
        if a[i] == b[i] {
            continue;
        }
        let (al, bl) = (a[i].is_alphabetic(), b[i].is_alphabetic());
        if al && bl {
            return a[i] < b[i];
        }
        if al || bl {
            return bl;
        }
        let (mut an, mut bn) = (0i64, 0i64);
        if a[i] == '0' || b[i] == '0' {
            for j in (0..i).rev() {
                if !go_is_digit(a[j]) {
                    break;
                }
                if a[j] != '0' {
                    an = 1;
                    bn = 1;
                    break;
                }
            }
        }
        let mut ai = i;
        while ai < a.len() && go_is_digit(a[ai]) {
            an = an
                .wrapping_mul(10)
                .wrapping_add(i64::from(u32::from(a[ai])) - i64::from(u32::from('0')));
            ai += 1;
        }
        let mut bi = i;
        while bi < b.len() && go_is_digit(b[bi]) {
            bn = bn
                .wrapping_mul(10)
                .wrapping_add(i64::from(u32::from(b[bi])) - i64::from(u32::from('0')));
            bi += 1;
        }
        if an != bn {
            return an < bn;
        }
        if ai != bi {
            return ai < bi;
        }
        return a[i] < b[i];
    }
    a.len() < b.len()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::super::{to_json, to_string};
    use super::*;

    #[test]
    fn writes_go_yaml_v2_style() {
        let v = json!({
            "status": {
                "conditions": [
                    {"type": "Ready", "status": "True", "message": "", "lastProbeTime": null},
                ],
                "phase": "Running",
                "podIP": "<PodIP>",
                "empty": {},
                "none": [],
                "nested": [[1, 2], ["a"]],
                "n": 1.5,
                "big": 1e21,
                "whole": 3.0,
            },
            "message": "containers with unready status: [ container ]",
            "text": "line1\nline2\n",
            "flag": "yes",
            "num": "1",
            "date": "12:30",
            "lead": " x",
            "tab": "a\tb",
            "quote": "it's",
            "hash": "a #b",
            "dash": "- a",
            "merge": "<<",
        });
        let want = concat!(
            "dash: '- a'\n",
            "date: \"12:30\"\n",
            "flag: \"yes\"\n",
            "hash: 'a #b'\n",
            "lead: ' x'\n",
            "merge: \"<<\"\n",
            "message: 'containers with unready status: [ container ]'\n",
            "num: \"1\"\n",
            "quote: it's\n",
            "status:\n",
            "  big: 1e+21\n",
            "  conditions:\n",
            "  - lastProbeTime: null\n",
            "    message: \"\"\n",
            "    status: \"True\"\n",
            "    type: Ready\n",
            "  empty: {}\n",
            // `n` is a YAML 1.1 boolean, so the key is quoted.
            "  \"n\": 1.5\n",
            "  nested:\n",
            "  - - 1\n",
            "    - 2\n",
            "  - - a\n",
            "  none: []\n",
            "  phase: Running\n",
            "  podIP: <PodIP>\n",
            "  whole: 3\n",
            "tab: \"a\\tb\"\n",
            "text: |\n",
            "  line1\n",
            "  line2\n",
        );
        assert_eq!(to_string(&v), want);
    }

    #[test]
    fn writes_top_level_scalars_and_empties() {
        assert_eq!(to_string(&json!("a")), "a\n");
        assert_eq!(to_string(&json!("True")), "\"True\"\n");
        assert_eq!(to_string(&Value::Null), "null\n");
        assert_eq!(to_string(&json!({})), "{}\n");
        assert_eq!(to_string(&json!([])), "[]\n");
        assert_eq!(to_string(&json!(["a", {"b": 1}])), "- a\n- b: 1\n");
        assert_eq!(to_string(&json!("a\nb")), "|-\n  a\n  b\n");
    }

    #[test]
    fn literal_chomping_and_indent_hints() {
        assert_eq!(to_string(&json!({"k": "a\nb"})), "k: |-\n  a\n  b\n");
        assert_eq!(to_string(&json!({"k": "a\n"})), "k: |\n  a\n");
        assert_eq!(to_string(&json!({"k": "a\n\n"})), "k: |+\n  a\n\n");
        assert_eq!(to_string(&json!({"k": " a\nb"})), "k: |2-\n   a\n  b\n");
        // A trailing space or a space before a break rules out a block scalar.
        assert_eq!(to_string(&json!({"k": "a \nb"})), "k: \"a \\nb\"\n");
        // Multi-line keys are complex keys.
        assert_eq!(to_string(&json!({"a\nb": 1})), "? |-\n  a\n  b\n: 1\n");
    }

    #[test]
    fn long_and_multi_line_keys_are_complex_keys() {
        let long = "k".repeat(129);
        assert_eq!(
            to_string(&json!({ long.clone(): {"a": 1}, "b": [1] })),
            format!("b:\n- 1\n? {long}\n: a: 1\n")
        );
        assert_eq!(
            to_string(&json!({ long.clone(): [1, 2] })),
            format!("? {long}\n: - 1\n  - 2\n")
        );
        let exactly = "k".repeat(128);
        assert_eq!(
            to_string(&json!({ exactly.clone(): 1 })),
            format!("{exactly}: 1\n")
        );
        let huge = "word ".repeat(300);
        let v = json!({ huge.trim_end(): {"x": [1, {"y": "z"}]}, "k\n": "v" });
        assert_eq!(to_json(&to_string(&v)).expect("reads back"), v);
    }

    #[test]
    fn long_lines_fold_at_80_columns() {
        let words = "word ".repeat(30);
        let s = words.trim_end();
        let out = to_string(&json!({ "message": s }));
        assert!(out.lines().count() > 1, "{out}");
        assert!(out.lines().all(|l| l.chars().count() <= 90), "{out}");
        assert_eq!(to_json(&out).expect("reads back")["message"], json!(s));
        let quoted = format!("x: {s}");
        let out = to_string(&json!({ "message": quoted }));
        assert!(out.starts_with("message: 'x: word"), "{out}");
        assert_eq!(to_json(&out).expect("reads back")["message"], json!(quoted));
    }

    #[test]
    fn keys_sort_like_go_yaml_v2() {
        let mut map = Map::new();
        for k in [
            "b", "a10", "a9", "a_b", "aB", "B", "a", "a2b", "a02", "1", "_",
        ] {
            map.insert(k.to_owned(), json!(0));
        }
        let out = to_string(&Value::Object(map));
        let keys: Vec<&str> = out
            .lines()
            .map(|l| l.split(':').next().unwrap_or(""))
            .collect();
        assert_eq!(
            keys,
            [
                "_", "\"1\"", "B", "a", "a_b", "a2b", "a02", "a9", "a10", "aB", "b"
            ]
        );
    }

    fn tricky_string() -> impl Strategy<Value = String> {
        let atoms = prop::sample::select(vec![
            "a", "Z", "0", "1", "9", " ", "  ", ":", ": ", "-", "- ", "#", " #", "'", "\"", "\\",
            "\n", "\t", "\r", "yes", "No", "true", "null", "~", ".", "e5", "0x", "<Now>", "[", "]",
            "{", "}", ",", "&", "*", "!", "|", ">", "%", "@", "`", "?", "é", "日本", "😀",
            "\u{feff}", "\u{85}", "\u{2028}", "\u{a0}", "\u{7f}", "\u{1}", "---", "...", "<<", "_",
            "+", "1.5", "12:30",
        ]);
        prop::collection::vec(atoms, 0..12).prop_map(|parts| parts.concat())
    }

    fn long_string() -> impl Strategy<Value = String> {
        prop::collection::vec(
            prop::sample::select(vec!["word", " ", "  ", "x:", "'", "\"", "é", "\t"]),
            40..120,
        )
        .prop_map(|parts| parts.concat())
    }

    proptest! {
        #[test]
        fn to_string_round_trips_strings(s in tricky_string(), k in tricky_string()) {
            let v = json!({ "value": s, "list": [s.clone(), {"k": s.clone()}], k.clone(): s });
            let text = to_string(&v);
            prop_assert_eq!(to_json(&text).map_err(|e| format!("{e}\n{text}")), Ok(v));
            let top = json!(s);
            let text = to_string(&top);
            prop_assert_eq!(to_json(&text).map_err(|e| format!("{e}\n{text}")), Ok(top));
        }

        #[test]
        fn to_string_round_trips_long_strings(s in long_string(), depth in 0usize..4) {
            let mut v = json!(s);
            for i in 0..depth {
                v = if i % 2 == 0 { json!({"key": v}) } else { json!([v]) };
            }
            let text = to_string(&v);
            prop_assert_eq!(to_json(&text).map_err(|e| format!("{e}\n{text}")), Ok(v));
        }

        #[test]
        fn to_string_round_trips_numbers(i in any::<i64>(), u in any::<u64>(), f in -1e30f64..1e30) {
            let v = json!({"i": i, "u": u, "f": f});
            let back = to_json(&to_string(&v)).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(&back["i"], &json!(i));
            prop_assert_eq!(&back["u"], &json!(u));
            prop_assert_eq!(back["f"].as_f64(), Some(f));
        }
    }
}
