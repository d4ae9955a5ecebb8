//! `kstage plugin test --output junit`: the run as JUnit XML, the format CI systems
//! (GitLab, Jenkins, GitHub actions' test reporters) read. A few elements, written here
//! with XML escaping rather than through a crate.
//!
//! ```xml
//! <testsuites tests="2" failures="1" errors="0" time="0.0012">
//!   <testsuite name="label-router.wasm" tests="2" failures="1" errors="0" time="0.0012">
//!     <testcase name="label-with-delay" classname="label-router.wasm.selector" file="cases/label-with-delay.yaml" time="0.0004"/>
//!     <testcase ...><failure message="..." type="mismatch">what differs</failure></testcase>
//!   </testsuite>
//! </testsuites>
//! ```
//!
//! A case file that is not a case is an `error`; a case whose answer differs, a
//! `failure`.

use super::test::Ran;

/// `text` escaped for XML 1.0 text and attribute values: markup characters as entities,
/// characters XML 1.0 cannot hold (most control characters) as U+FFFD.
pub(super) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => out.push(c),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

/// Whether `ran` failed because its file is not a case (an error, not a failure).
fn is_error(ran: &Ran) -> bool {
    ran.capability.is_none()
}

/// The run of `suite`'s cases as a JUnit XML document.
pub(super) fn xml(suite: &str, ran: &[Ran]) -> String {
    let errors = ran.iter().filter(|r| !r.passed() && is_error(r)).count();
    let failures = ran.iter().filter(|r| !r.passed() && !is_error(r)).count();
    let time: f64 = ran.iter().map(|r| r.took.as_secs_f64()).sum();
    let counts = format!(
        "tests=\"{}\" failures=\"{failures}\" errors=\"{errors}\" time=\"{time:.6}\"",
        ran.len()
    );
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    out.push_str(&format!(
        "<testsuites name=\"kstage plugin test\" {counts}>\n"
    ));
    out.push_str(&format!(
        "  <testsuite name=\"{}\" {counts}>\n",
        escape(suite)
    ));
    for r in ran {
        let class = match r.capability {
            Some(c) => format!("{suite}.{c}"),
            None => suite.to_owned(),
        };
        out.push_str(&format!(
            "    <testcase name=\"{}\" classname=\"{}\" file=\"{}\" time=\"{:.6}\"",
            escape(&r.name),
            escape(&class),
            escape(&r.path.display().to_string()),
            r.took.as_secs_f64()
        ));
        if r.passed() {
            out.push_str("/>\n");
            continue;
        }
        let (element, kind) = if is_error(r) {
            ("error", "case")
        } else {
            ("failure", "mismatch")
        };
        let message = r.problems.first().map(String::as_str).unwrap_or_default();
        let message = message.lines().next().unwrap_or_default();
        let mut body = r.problems.join("\n");
        if let Some(Ok(answer)) = &r.answer {
            body.push_str(&format!("\nanswer: {answer}"));
        }
        out.push_str(&format!(
            ">\n      <{element} message=\"{}\" type=\"{kind}\">{}</{element}>\n    </testcase>\n",
            escape(message),
            escape(&body)
        ));
    }
    out.push_str("  </testsuite>\n</testsuites>\n");
    out
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::time::Duration;

    use super::*;
    use crate::plugin::Capability;

    fn ran(name: &str, capability: Option<Capability>, problems: &[&str]) -> Ran {
        Ran {
            name: name.to_owned(),
            path: PathBuf::from(format!("cases/{name}.yaml")),
            capability,
            took: Duration::from_micros(250),
            problems: problems.iter().map(|p| (*p).to_owned()).collect(),
            answer: Some(Ok(serde_json::json!({"stage": "a<b"}))),
            bench: None,
        }
    }

    #[test]
    fn markup_and_control_characters_are_escaped() {
        assert_eq!(
            escape("a<b & \"c\" 'd' >\u{1}\ttab"),
            "a&lt;b &amp; &quot;c&quot; &apos;d&apos; &gt;\u{FFFD}\ttab"
        );
    }

    #[test]
    fn passes_failures_and_errors_are_counted_and_described() {
        let xml = xml(
            "p.wasm",
            &[
                ran("good", Some(Capability::Selector), &[]),
                ran(
                    "bad",
                    Some(Capability::Selector),
                    &[".stage: expected \"a\", got \"a<b\""],
                ),
                ran("broken", None, &["not a case: unknown key \"expected\""]),
            ],
        );
        assert!(
            xml.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"),
            "{xml}"
        );
        assert!(
            xml.contains("<testsuite name=\"p.wasm\" tests=\"3\" failures=\"1\" errors=\"1\" time=\"0.000750\">"),
            "{xml}"
        );
        assert!(
            xml.contains("<testcase name=\"good\" classname=\"p.wasm.selector\" file=\"cases/good.yaml\" time=\"0.000250\"/>"),
            "{xml}"
        );
        assert!(
            xml.contains("<failure message=\".stage: expected &quot;a&quot;, got &quot;a&lt;b&quot;\" type=\"mismatch\">"),
            "{xml}"
        );
        assert!(
            xml.contains("answer: {&quot;stage&quot;:&quot;a&lt;b&quot;}</failure>"),
            "{xml}"
        );
        assert!(
            xml.contains(
                "<error message=\"not a case: unknown key &quot;expected&quot;\" type=\"case\">"
            ),
            "{xml}"
        );
        assert!(xml.ends_with("  </testsuite>\n</testsuites>\n"), "{xml}");
    }
}
