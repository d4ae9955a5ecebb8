//! chaos-router: a kstage plugin that sends a fixed share of pods to a chaos Stage
//! and renders JSON templates without Go templates. See README.md for the rules.

use kstage_plugin::serde::de::IgnoredAny;
use kstage_plugin::{Candidate, Info, Object, Plugin, Renderer, Selection, Selector, host, json};

/// The annotation that sets the share of pods (percent) routed to the chaos Stage.
const PERCENT_ANNOTATION: &str = "kstage.dev/chaos-percent";
const DEFAULT_PERCENT: u64 = 10;

struct ChaosRouter;

impl Plugin for ChaosRouter {
    fn info() -> Info {
        Info::new("chaos-router", env!("CARGO_PKG_VERSION"))
    }
}

impl Selector for ChaosRouter {
    fn select(object: &Object, candidates: &[Candidate]) -> Result<Option<Selection>, String> {
        let keep_delay = |c: &Candidate| Selection {
            stage: c.name.clone(),
            delay_ms: None,
        };
        if let Some(chaos) = candidates.iter().find(|c| is_chaos(c)) {
            let percent = chaos_percent(object)?;
            let name = object.name().unwrap_or_default();
            if fnv1a64(name.as_bytes()) % 100 < percent {
                return Ok(Some(keep_delay(chaos)));
            }
        }
        // The first of the heaviest non-chaos candidates.
        let mut best: Option<&Candidate> = None;
        for c in candidates.iter().filter(|c| !is_chaos(c)) {
            if best.is_none_or(|b| c.weight > b.weight) {
                best = Some(c);
            }
        }
        Ok(best.map(keep_delay))
    }
}

fn is_chaos(c: &Candidate) -> bool {
    c.name.contains("chaos")
}

/// The annotation's percent: an integer from 0 to 100; 10 when the annotation is absent.
fn chaos_percent(object: &Object) -> Result<u64, String> {
    let Some(raw) = object.get_in(["metadata", "annotations", PERCENT_ANNOTATION]) else {
        return Ok(DEFAULT_PERCENT);
    };
    json::as_str(raw)
        .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|&p| p <= 100)
        .ok_or_else(|| {
            format!("annotation {PERCENT_ANNOTATION}: {raw} is not an integer from 0 to 100")
        })
}

/// FNV-1a, 64 bits.
fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

impl Renderer for ChaosRouter {
    fn render(stage: &str, template: &str, object: &Object) -> Result<String, String> {
        // Validate first (serde_json's messages name line and column), then copy the
        // template compactly, substituting in string values as we go.
        kstage_plugin::serde_json::from_str::<IgnoredAny>(template)
            .map_err(|e| format!("stage {stage}: the template is not JSON: {e}"))?;
        let mut r = Render {
            t: template,
            object: object.index(),
            out: String::with_capacity(template.len() + 64),
            now: None,
        };
        r.value(0)?;
        Ok(r.out)
    }
}

struct Render<'a> {
    t: &'a str,
    /// The object, its top-level members remembered across the template's references.
    object: json::Index<'a>,
    out: String,
    /// `host::now()`, asked once per render.
    now: Option<String>,
}

impl<'a> Render<'a> {
    fn ws(&self, mut i: usize) -> usize {
        let b = self.t.as_bytes();
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = b.get(i) {
            i += 1;
        }
        i
    }

    fn byte(&self, i: usize) -> Result<u8, String> {
        self.t
            .as_bytes()
            .get(i)
            .copied()
            .ok_or_else(|| "unexpected end of template".to_string())
    }

    /// Copy (and substitute in) the value at `i`; returns the index after it.
    fn value(&mut self, i: usize) -> Result<usize, String> {
        let i = self.ws(i);
        match self.byte(i)? {
            open @ (b'{' | b'[') => {
                let close = if open == b'{' { b'}' } else { b']' };
                self.out.push(open as char);
                let mut i = self.ws(i + 1);
                if self.byte(i)? == close {
                    self.out.push(close as char);
                    return Ok(i + 1);
                }
                loop {
                    if open == b'{' {
                        // A key, verbatim, then its colon.
                        let end = self.string_end(i)?;
                        self.out.push_str(&self.t[i..end]);
                        i = self.ws(end);
                        self.out.push(':');
                        i += 1;
                    }
                    let end = self.value(i)?;
                    i = self.ws(end);
                    match self.byte(i)? {
                        b',' => {
                            self.out.push(',');
                            i = self.ws(i + 1);
                        }
                        c if c == close => {
                            self.out.push(close as char);
                            return Ok(i + 1);
                        }
                        _ => return Err("malformed template".to_string()),
                    }
                }
            }
            b'"' => {
                let end = self.string_end(i)?;
                let raw = &self.t[i..end];
                if raw.contains("$(") {
                    let text = json::as_str(raw).ok_or("malformed string in the template")?;
                    self.string(&text)?;
                } else {
                    self.out.push_str(raw);
                }
                Ok(end)
            }
            _ => {
                let b = self.t.as_bytes();
                let mut end = i;
                while end < b.len()
                    && !matches!(b[end], b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r')
                {
                    end += 1;
                }
                self.out.push_str(&self.t[i..end]);
                Ok(end)
            }
        }
    }

    fn string_end(&self, open: usize) -> Result<usize, String> {
        let b = self.t.as_bytes();
        let mut i = open + 1;
        while i < b.len() {
            match b[i] {
                b'"' => return Ok(i + 1),
                b'\\' => i += 2,
                _ => i += 1,
            }
        }
        Err("unterminated string in the template".to_string())
    }

    /// The JSON text at `path` in the object; `Err` for a malformed path.
    fn lookup(&mut self, path: &str) -> Result<Option<&'a str>, String> {
        json::check_path(path)?;
        Ok(self.object.get(path))
    }

    fn now(&mut self) -> &str {
        self.now.get_or_insert_with(host::now)
    }

    /// A string value that holds `$(`: exactly one reference becomes the referenced
    /// JSON value, references in longer text are interpolated.
    fn string(&mut self, text: &str) -> Result<(), String> {
        if let Some(reference) = exact_reference(text) {
            if reference == "now" {
                let now = self.now().to_string();
                json::push_string(&mut self.out, &now);
            } else {
                match self.lookup(reference)? {
                    Some(raw) => json::push_compact(&mut self.out, raw),
                    None => self.out.push_str("null"),
                }
            }
            return Ok(());
        }
        let mut result = String::with_capacity(text.len() + 32);
        let mut rest = text;
        while let Some(start) = rest.find("$(") {
            let Some(len) = rest[start..].find(')') else {
                break;
            };
            let reference = &rest[start + 2..start + len];
            result.push_str(&rest[..start]);
            if reference == "now" {
                result.push_str(self.now());
            } else if reference.starts_with('.') {
                match self.lookup(reference)? {
                    Some(raw) => match json::as_str(raw) {
                        Some(s) => result.push_str(&s),
                        None => json::push_compact(&mut result, raw),
                    },
                    None => result.push_str("null"),
                }
            } else {
                // Not ours (a Kubernetes `$(VAR)` reference, say): kept as written.
                result.push_str(&rest[start..start + len + 1]);
            }
            rest = &rest[start + len + 1..];
        }
        result.push_str(rest);
        json::push_string(&mut self.out, &result);
        Ok(())
    }
}

/// `$(now)` or `$(.PATH)` as the whole text: the reference inside.
fn exact_reference(text: &str) -> Option<&str> {
    let inner = text.strip_prefix("$(")?.strip_suffix(')')?;
    (inner == "now" || (inner.starts_with('.') && !inner.contains(')'))).then_some(inner)
}

kstage_plugin::export!(ChaosRouter: selector, renderer);

#[cfg(test)]
mod tests {
    use super::*;

    const POD: &str = r#"{"metadata": {"name": "web-0", "namespace": "ns",
        "annotations": {"kstage.dev/chaos-percent": "30"}},
        "spec": {"containers": [{"name": "c", "ports": [ {"containerPort": 80} ]}]},
        "status": {"ready": true, "note": "a \"b\""}}"#;

    fn render(template: &str) -> Result<String, String> {
        ChaosRouter::render("s", template, Object::new(POD))
    }

    #[test]
    fn renders_compact_json() {
        assert_eq!(
            render(
                r#" { "a" : "$(.spec.containers.0)", "b": [ 1, 2.5e3, "$(.nope)" ],
                "c": "x $(.status.note) $(.spec.containers.0.ports) $(HOME) $(.nope) $(",
                "d": "$(.status.note)", "\u00e9": "\u00e9", "e": {}, "f": [] } "#
            ),
            Ok(concat!(
                r#"{"a":{"name":"c","ports":[{"containerPort":80}]},"b":[1,2.5e3,null],"#,
                r#""c":"x a \"b\" [{\"containerPort\":80}] $(HOME) null $(","#,
                r#""d":"a \"b\"","\u00e9":"\u00e9","e":{},"f":[]}"#
            )
            .to_string())
        );
        let whole = render(r#""$(.)""#).unwrap();
        let value = |s: &str| {
            kstage_plugin::serde_json::from_str::<kstage_plugin::serde_json::Value>(s).unwrap()
        };
        assert_eq!(value(&whole), value(POD));
        assert_eq!(
            whole.matches(' ').count(),
            1,
            "only the space inside \"a \\\"b\\\"\": {whole}"
        );
        assert_eq!(render("42"), Ok("42".to_string()));
    }

    #[test]
    fn render_errors() {
        assert!(
            render("status: {phase: Running}")
                .unwrap_err()
                .contains("not JSON")
        );
        assert!(render(r#"{"a": 1} x"#).unwrap_err().contains("not JSON"));
        assert!(
            render(r#"{"a": "$(.a..b)"}"#)
                .unwrap_err()
                .contains("malformed path")
        );
    }

    #[test]
    fn selects() {
        let c = |name: &str, weight| Candidate {
            name: name.into(),
            weight,
            delay_ms: Some(5),
        };
        let pick = |object: &str, candidates: &[Candidate]| {
            ChaosRouter::select(Object::new(object), candidates).map(|s| s.map(|s| s.stage))
        };
        let candidates = [c("a", 1), c("x-chaos", 9), c("b", 2), c("c", 2)];
        // "web-0" hashes to 28: chaos at 30 percent, not at the default 10.
        assert_eq!(pick(POD, &candidates), Ok(Some("x-chaos".into())));
        assert_eq!(
            pick(r#"{"metadata": {"name": "web-0"}}"#, &candidates),
            Ok(Some("b".into()))
        );
        assert_eq!(
            pick(r#"{"metadata": {"name": "web-0"}}"#, &candidates[1..2]),
            Ok(None)
        );
        for bad in ["-1", "101", "1.5", " 5", "", "0x1"] {
            let object = format!(
                r#"{{"metadata": {{"annotations": {{"{PERCENT_ANNOTATION}": "{bad}"}}}}}}"#
            );
            assert!(
                pick(&object, &candidates)
                    .unwrap_err()
                    .contains(PERCENT_ANNOTATION),
                "{bad}"
            );
        }
        let object = r#"{"metadata": {"annotations": {"kstage.dev/chaos-percent": 5}}}"#;
        assert!(pick(object, &candidates).is_err());
    }

    #[test]
    fn fnv() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }
}
