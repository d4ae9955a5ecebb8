//! Reading YAML: parser events to JSON values, with go-yaml v2's scalar typing, key
//! conversion, anchors, aliases and merge keys.

use std::collections::HashMap;

use serde_json::{Map, Number, Value};
use serde_saphyr::granit_parser::{Event, Parser, ScalarStyle, Tag};

use super::YamlError;
use super::scalar::{Scalar, resolve_plain};
use crate::go::{FloatVerb, go_format_float};

const CORE_TAG_PREFIX: &str = "tag:yaml.org,2002:";

/// How many values aliases may copy in one parse (guards against "billion laughs").
const ALIAS_EXPANSION_BUDGET: usize = 1_000_000;

/// A collection being built.
enum Frame {
    Seq {
        items: Vec<Value>,
        anchor: usize,
    },
    Map {
        map: Map<String, Value>,
        key: Option<PendingKey>,
        anchor: usize,
    },
}

enum PendingKey {
    Key(String),
    Merge,
}

/// A finished node, with what the key conversion needs to know about it.
struct Node {
    value: Value,
    /// A plain `<<` or a `!!merge` scalar.
    merge: bool,
    /// The scalar resolved to an unsigned integer above `i64::MAX` (not a JSON-able key).
    big_uint: bool,
}

struct Loader {
    stack: Vec<Frame>,
    anchors: HashMap<usize, (Value, usize)>,
    alias_budget: usize,
}

pub(super) fn load(
    src: &str,
    first_only: bool,
    mut on_doc: impl FnMut(Value),
) -> Result<(), YamlError> {
    let mut options = serde_saphyr::granit_parser::Options::default();
    options.emit_comments = false;
    // go-yaml (a libyaml port) adds no line feed to a block scalar ending at EOF.
    options.block_scalar_eof_without_line_feed = true;
    let parser = Parser::new_from_str_with_options(src, options);
    let mut loader = Loader {
        stack: Vec::new(),
        anchors: HashMap::new(),
        alias_budget: ALIAS_EXPANSION_BUDGET,
    };
    let mut root: Option<Value> = None;
    let mut doc_index = 0usize;
    for item in parser {
        let (event, span) = item.map_err(|e| YamlError::from_scan(&e).in_document(doc_index))?;
        let (line, column, doc) = (span.start.line(), span.start.col() + 1, doc_index);
        let located = move |e: YamlError| e.at(line, column).in_document(doc);
        match event {
            Event::DocumentStart(..) => {
                loader.anchors.clear();
                root = None;
            }
            Event::DocumentEnd => {
                on_doc(root.take().unwrap_or(Value::Null));
                doc_index += 1;
                if first_only {
                    return Ok(());
                }
            }
            Event::Scalar(text, style, anchor, tag) => {
                let node = scalar_node(&text, style, tag.as_deref()).map_err(located)?;
                if anchor != 0 {
                    loader.anchors.insert(anchor, (node.value.clone(), 1));
                }
                if let Some(done) = loader.place(node).map_err(located)? {
                    root = Some(done);
                }
            }
            Event::Alias(id) => {
                let node = loader.alias(id).map_err(located)?;
                if let Some(done) = loader.place(node).map_err(located)? {
                    root = Some(done);
                }
            }
            Event::SequenceStart(_, anchor, _) => loader.stack.push(Frame::Seq {
                items: Vec::new(),
                anchor,
            }),
            Event::MappingStart(_, anchor, _) => loader.stack.push(Frame::Map {
                map: Map::new(),
                key: None,
                anchor,
            }),
            Event::SequenceEnd | Event::MappingEnd => {
                if let Some(done) = loader.close().map_err(located)? {
                    root = Some(done);
                }
            }
            Event::UnresolvedAlias(name) => {
                return Err(located(YamlError::new(format!("unknown anchor '{name}'"))));
            }
            _ => {}
        }
    }
    Ok(())
}

impl Loader {
    fn alias(&mut self, id: usize) -> Result<Node, YamlError> {
        let (value, size) = self
            .anchors
            .get(&id)
            .ok_or_else(|| YamlError::new("alias to an unknown anchor"))?;
        self.alias_budget = self
            .alias_budget
            .checked_sub(*size)
            .ok_or_else(|| YamlError::new("too many values copied by aliases"))?;
        Ok(Node {
            value: value.clone(),
            merge: false,
            big_uint: false,
        })
    }

    fn close(&mut self) -> Result<Option<Value>, YamlError> {
        let (value, anchor) = match self.stack.pop() {
            Some(Frame::Seq { items, anchor }) => (Value::Array(items), anchor),
            Some(Frame::Map { map, key, anchor }) => {
                if key.is_some() {
                    return Err(YamlError::new("mapping key without a value"));
                }
                (Value::Object(map), anchor)
            }
            None => return Err(YamlError::new("unbalanced collection end")),
        };
        if anchor != 0 {
            let size = value_size(&value);
            self.anchors.insert(anchor, (value.clone(), size));
        }
        self.place(Node {
            value,
            merge: false,
            big_uint: false,
        })
    }

    /// Puts a finished node into its parent; returns it when it is the document root.
    fn place(&mut self, node: Node) -> Result<Option<Value>, YamlError> {
        match self.stack.last_mut() {
            None => Ok(Some(node.value)),
            Some(Frame::Seq { items, .. }) => {
                items.push(node.value);
                Ok(None)
            }
            Some(Frame::Map { map, key, .. }) => {
                match key.take() {
                    None => {
                        *key = Some(if node.merge {
                            PendingKey::Merge
                        } else {
                            PendingKey::Key(key_string(&node)?)
                        });
                    }
                    Some(PendingKey::Key(k)) => {
                        map.insert(k, node.value);
                    }
                    Some(PendingKey::Merge) => merge_into(map, node.value)?,
                }
                Ok(None)
            }
        }
    }
}

fn value_size(value: &Value) -> usize {
    match value {
        Value::Array(items) => 1 + items.iter().map(value_size).sum::<usize>(),
        Value::Object(map) => 1 + map.values().map(value_size).sum::<usize>(),
        _ => 1,
    }
}

/// go-yaml v2 merge: a mapping, or a sequence of mappings where earlier ones win; merged
/// keys replace keys already set (later explicit keys replace merged ones).
fn merge_into(map: &mut Map<String, Value>, value: Value) -> Result<(), YamlError> {
    const WANT_MAP: &str = "map merge requires map or sequence of maps as the value";
    match value {
        Value::Object(src) => {
            map.extend(src);
            Ok(())
        }
        Value::Array(items) => {
            if !items.iter().all(Value::is_object) {
                return Err(YamlError::new(WANT_MAP));
            }
            for item in items.into_iter().rev() {
                if let Value::Object(src) = item {
                    map.extend(src);
                }
            }
            Ok(())
        }
        _ => Err(YamlError::new(WANT_MAP)),
    }
}

/// The JSON key for a YAML key, as `sigs.k8s.io/yaml` converts it.
fn key_string(node: &Node) -> Result<String, YamlError> {
    match &node.value {
        Value::String(s) => Ok(s.clone()),
        Value::Bool(b) => Ok(b.to_string()),
        Value::Number(n) if node.big_uint => Err(YamlError::new(format!(
            "unsupported map key of type uint64: {n}"
        ))),
        Value::Number(n) => Ok(match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => i.to_string(),
            (None, Some(u), _) => u.to_string(),
            // Go formats float keys with 32-bit precision.
            (None, None, Some(f)) => go_format_float(f, FloatVerb::G, true),
            (None, None, None) => n.to_string(),
        }),
        Value::Null => Err(YamlError::new("unsupported map key: null")),
        Value::Array(_) | Value::Object(_) => Err(YamlError::new(
            "unsupported map key: a sequence or mapping cannot be a JSON key",
        )),
    }
}

/// The JSON value of a scalar with this text, style and tag.
pub(super) fn scalar_value(
    text: &str,
    style: ScalarStyle,
    tag: Option<&Tag>,
) -> Result<Value, YamlError> {
    scalar_node(text, style, tag).map(|node| node.value)
}

fn scalar_node(text: &str, style: ScalarStyle, tag: Option<&Tag>) -> Result<Node, YamlError> {
    let plain = style == ScalarStyle::Plain;
    let core = tag.and_then(|t| t.suffix_in_namespace(CORE_TAG_PREFIX));
    let merge = text == "<<" && ((plain && tag.is_none()) || core.as_deref() == Some("merge"));
    let resolved = match (tag, core.as_deref()) {
        (None, _) if plain => resolve_plain(text),
        (None, _) => Scalar::Str,
        (Some(_), Some(want @ ("null" | "bool" | "int" | "float"))) => {
            let got = resolve_plain(text);
            match (want, got) {
                ("null", Scalar::Null)
                | ("bool", Scalar::Bool(_))
                | ("int", Scalar::Int(_) | Scalar::Uint(_))
                | ("float", Scalar::Float(_)) => got,
                ("float", Scalar::Int(i)) => Scalar::Float(i as f64),
                ("float", Scalar::Uint(u)) => Scalar::Float(u as f64),
                _ => {
                    return Err(YamlError::new(format!(
                        "cannot decode `{text}` as a !!{want}"
                    )));
                }
            }
        }
        (Some(_), Some("binary")) => {
            return Err(YamlError::new("the !!binary tag is not supported"));
        }
        // `!!str`, `!!timestamp`, the non-specific `!` and application tags keep the text.
        (Some(_), _) => Scalar::Str,
    };
    let big_uint = matches!(resolved, Scalar::Uint(_));
    let value = match resolved {
        Scalar::Null => Value::Null,
        Scalar::Bool(b) => Value::Bool(b),
        Scalar::Int(i) => Value::Number(i.into()),
        Scalar::Uint(u) => Value::Number(u.into()),
        Scalar::Float(f) => float_value(f)?,
        Scalar::Str => Value::String(text.to_owned()),
    };
    Ok(Node {
        value,
        merge,
        big_uint,
    })
}

/// A float as Go's JSON encoder would print it, read back: integral values in `i64` range
/// become integers.
fn float_value(f: f64) -> Result<Value, YamlError> {
    if !f.is_finite() {
        return Err(YamlError::new(format!(
            "unsupported value: {} (JSON has no NaN or Inf)",
            go_format_float(f, FloatVerb::G, false)
        )));
    }
    // 2^63 is exact in f64; every integral f64 below it in magnitude fits an i64.
    const LIMIT: f64 = 9_223_372_036_854_775_808.0;
    if f.fract() == 0.0 && f.abs() < LIMIT {
        return Ok(Value::Number((f as i64).into()));
    }
    Number::from_f64(f)
        .map(Value::Number)
        .ok_or_else(|| YamlError::new("unsupported float value"))
}

#[cfg(test)]
mod tests {
    use std::fmt::Write as _;

    use serde_json::json;

    use super::super::{documents, to_json};
    use super::*;

    fn one(src: &str) -> Value {
        to_json(src).unwrap_or_else(|e| panic!("{src:?}: {e}"))
    }

    fn scalar(src: &str) -> Value {
        one(&format!("v: {src}"))["v"].clone()
    }

    #[test]
    fn yaml11_booleans_unquoted_only() {
        for s in [
            "y", "Y", "yes", "Yes", "YES", "on", "On", "ON", "true", "True", "TRUE",
        ] {
            assert_eq!(scalar(s), json!(true), "{s}");
            assert_eq!(scalar(&format!("'{s}'")), json!(s), "'{s}'");
            assert_eq!(scalar(&format!("\"{s}\"")), json!(s), "\"{s}\"");
        }
        for s in [
            "n", "N", "no", "No", "NO", "off", "Off", "OFF", "false", "False", "FALSE",
        ] {
            assert_eq!(scalar(s), json!(false), "{s}");
            assert_eq!(scalar(&format!("'{s}'")), json!(s), "'{s}'");
        }
        // go-yaml v2 knows only these spellings.
        for s in ["yEs", "tRUE", "oN", "nO", "Off!", "truee"] {
            assert_eq!(scalar(s), json!(s), "{s}");
        }
    }

    #[test]
    fn nulls() {
        for s in ["", "~", "null", "Null", "NULL"] {
            assert_eq!(scalar(s), Value::Null, "{s:?}");
        }
        assert_eq!(scalar("'null'"), json!("null"));
        assert_eq!(scalar("nULL"), json!("nULL"));
        assert_eq!(one(""), Value::Null);
        assert_eq!(one("# only a comment\n"), Value::Null);
    }

    #[test]
    fn numbers_like_go_yaml_v2() {
        for (src, want) in [
            ("1", json!(1)),
            ("-1", json!(-1)),
            ("+1", json!(1)),
            ("0", json!(0)),
            ("-0", json!(0)),
            ("0755", json!(493)),
            ("0o17", json!(15)),
            ("0x1F", json!(31)),
            ("-0x10", json!(-16)),
            ("0b101", json!(5)),
            ("1_000", json!(1000)),
            ("08", json!(8)),
            ("9223372036854775807", json!(i64::MAX)),
            ("-9223372036854775808", json!(i64::MIN)),
            ("18446744073709551615", json!(u64::MAX)),
            ("1e3", json!(1000)),
            ("1.0", json!(1)),
            ("1.", json!(1)),
            ("1.5", json!(1.5)),
            ("-2.5e-3", json!(-0.0025)),
            (".5", json!(0.5)),
            ("+.5", json!(0.5)),
            ("1e21", json!(1e21)),
        ] {
            assert_eq!(scalar(src), want, "{src}");
        }
        for src in [
            "1.2.3", "0x", "1e", "1e400", ".", "+", "1_", "0b2", "12:30", "1.5Gi", "10m",
        ] {
            let got = scalar(src);
            if src == "1_" {
                // `1_` is `1` once underscores go, as in go-yaml.
                assert_eq!(got, json!(1));
            } else {
                assert_eq!(got, json!(src), "{src}");
            }
        }
        assert_eq!(scalar("'1'"), json!("1"));
    }

    #[test]
    fn timestamps_stay_strings() {
        assert_eq!(
            scalar("2006-01-02T15:04:05Z"),
            json!("2006-01-02T15:04:05Z")
        );
        assert_eq!(scalar("2006-01-02"), json!("2006-01-02"));
    }

    #[test]
    fn non_finite_floats_are_errors() {
        for s in [".nan", ".inf", "-.inf", ".Inf", "+.INF"] {
            let err = to_json(&format!("v: {s}")).expect_err(s);
            assert!(err.message().contains("unsupported value"), "{err}");
        }
    }

    #[test]
    fn keys_are_converted_like_sigs_yaml() {
        assert_eq!(
            one("1: a\ntrue: b\nyes: c\n1.5: d\n0.1: e\n1e3: f\n'2': g\n"),
            json!({"1": "a", "true": "c", "1.5": "d", "0.1": "e", "1000": "f", "2": "g"})
        );
        for src in [
            "~: a",
            ": a",
            "[a]: b",
            "{a: 1}: b",
            "18446744073709551615: a",
        ] {
            let err = to_json(src).expect_err(src);
            assert!(
                err.message().contains("unsupported map key"),
                "{src}: {err}"
            );
        }
    }

    #[test]
    fn block_scalars_and_quoting() {
        let v = one(concat!(
            "lit: |\n  a\n  b\n",
            "strip: |-\n  a\n",
            "keep: |+\n  a\n\n",
            "fold: >\n  a\n  b\n",
            "dq: \"x\\ty\\u003c\"\n",
            "sq: 'it''s'\n",
            "multi: a\n  b\n",
            "eof: |\n  last",
        ));
        assert_eq!(
            v,
            json!({
                "lit": "a\nb\n", "strip": "a", "keep": "a\n\n", "fold": "a b\n",
                "dq": "x\ty<", "sq": "it's", "multi": "a b", "eof": "last"
            })
        );
        // A block scalar holding "true" is a string.
        assert_eq!(one("v: |-\n  true\n")["v"], json!("true"));
    }

    #[test]
    fn tags() {
        assert_eq!(scalar("!!str 1"), json!("1"));
        assert_eq!(scalar("!!str true"), json!("true"));
        assert_eq!(scalar("!!int \"5\""), json!(5));
        assert_eq!(scalar("!!float 1"), json!(1));
        assert_eq!(scalar("!!bool yes"), json!(true));
        assert_eq!(scalar("!!null ''"), Value::Null);
        assert_eq!(scalar("!custom 12"), json!("12"));
        assert_eq!(scalar("! 12"), json!("12"));
        assert_eq!(one("v: !!map {a: 1}"), json!({"v": {"a": 1}}));
        assert!(to_json("v: !!int abc").is_err());
        assert!(to_json("v: !!bool 1").is_err());
        assert!(to_json("v: !!binary aGVsbG8=").is_err());
    }

    #[test]
    fn anchors_aliases_and_merges() {
        assert_eq!(
            one("a: &x [1, {b: 2}]\nc: *x\nd: &s str\ne: *s\n"),
            json!({"a": [1, {"b": 2}], "c": [1, {"b": 2}], "d": "str", "e": "str"})
        );
        let v = one(concat!(
            "base: &b {a: 1, b: 2}\n",
            "other: &o {b: 20, c: 30}\n",
            "one:\n  <<: *b\n  b: 3\n",
            "many:\n  <<: [*b, *o]\n",
            "early:\n  a: 0\n  <<: *b\n",
            "quoted:\n  '<<': x\n",
        ));
        assert_eq!(v["one"], json!({"a": 1, "b": 3}));
        assert_eq!(v["many"], json!({"a": 1, "b": 2, "c": 30}));
        // go-yaml v2: a merge replaces keys set before it.
        assert_eq!(v["early"], json!({"a": 1, "b": 2}));
        assert_eq!(v["quoted"], json!({"<<": "x"}));
        assert!(to_json("a:\n  <<: 1\n").is_err());
        assert!(to_json("a:\n  <<: [1]\n").is_err());
    }

    #[test]
    fn alias_bombs_are_stopped() {
        let mut src = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 1..10 {
            let p = i - 1;
            let _ = writeln!(
                src,
                "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]"
            );
        }
        let err = to_json(&src).expect_err("bomb");
        assert!(err.message().contains("aliases"), "{err}");
    }

    #[test]
    fn documents_skip_empty_and_null() {
        let docs = documents("a: 1\n---\n---\nnull\n---\n# c\n---\n- 2\n...\n").expect("valid");
        assert_eq!(docs, vec![json!({"a": 1}), json!([2])]);
        assert_eq!(documents("").expect("valid"), Vec::<Value>::new());
        // `to_json` reads the first document only, like go-yaml's Unmarshal.
        assert_eq!(one("a: 1\n---\nb: 2\n"), json!({"a": 1}));
    }

    #[test]
    fn errors_name_line_column_and_document() {
        let err = to_json("a: 1\nb: [1, 2\nc: 3\n").expect_err("unclosed flow");
        assert!(err.line().is_some() && err.column().is_some(), "{err}");
        assert!(
            err.to_string().starts_with("invalid YAML at line "),
            "{err}"
        );

        let err = documents("a: 1\n---\nb: 1\nb: [\n").expect_err("second doc");
        assert_eq!(err.document(), Some(1), "{err}");
        assert!(err.to_string().contains("(document 2)"), "{err}");

        let err = to_json("a: 1\nb:\n  ~: x\n").expect_err("null key");
        assert_eq!(err.line(), Some(3), "{err}");
        assert_eq!(err.column(), Some(3), "{err}");

        let err = to_json("a: 1\n  b: 2\n").expect_err("bad indent");
        assert_eq!(err.line(), Some(2), "{err}");
    }

    #[test]
    fn duplicate_keys_last_wins() {
        assert_eq!(one("a: 1\na: 2\n"), json!({"a": 2}));
    }
}
