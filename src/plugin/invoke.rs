//! Calls described as JSON: what `kstage plugin call` reads and prints, and what the
//! example plugins' test cases (`plugins/examples/*/cases/*.yaml`) are written in.
//!
//! Inputs: selector `{object, candidates: [{name, weight, delayMs}]}`; renderer
//! `{stage, template, object}`; classifier `{kind, status, reason, message,
//! retryAfterMs, stage, step, attempt, object}`. Answers: selector `{stage, delayMs}` or
//! `null`; renderer the rendered JSON; classifier `{decision, afterMs | warn}`.

use serde::Deserialize;
use serde_json::{Value, json};

use super::{Capability, Plugin, convert, types};

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CandidateInput {
    name: String,
    #[serde(default)]
    weight: i64,
    #[serde(default)]
    delay_ms: Option<i64>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SelectInput {
    object: Value,
    candidates: Vec<CandidateInput>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RenderInput {
    #[serde(default)]
    stage: String,
    template: String,
    object: Value,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ClassifyInput {
    kind: String,
    #[serde(default)]
    status: Option<u16>,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    message: String,
    #[serde(default)]
    retry_after_ms: Option<u64>,
    #[serde(default)]
    stage: String,
    #[serde(default)]
    step: u32,
    #[serde(default)]
    attempt: u32,
    #[serde(default)]
    object: Value,
}

/// A WIT decision as JSON.
pub fn decision_json(decision: &types::Decision) -> Value {
    match decision {
        types::Decision::RetryAfter(ms) => json!({"decision": "retry-after", "afterMs": ms}),
        types::Decision::Backoff => json!({"decision": "backoff"}),
        types::Decision::Refresh => json!({"decision": "refresh"}),
        types::Decision::Drop(warn) => json!({"decision": "drop", "warn": warn}),
    }
}

fn parse<T: serde::de::DeserializeOwned>(input: Value) -> Result<T, String> {
    serde_path_to_error::deserialize(input)
        .map_err(|e| format!("input {}: {}", e.path(), e.inner()))
}

/// The input of a call to `capability` in `document`: the document itself, or the
/// `input` of a test case file (`{capability, input, expect | expectError}`), whose
/// `capability`, when it names one, must be the one called.
pub fn input_of(document: Value, capability: Capability) -> Result<Value, String> {
    let Value::Object(mut map) = document else {
        return Ok(document);
    };
    let Some(input) = map.remove("input") else {
        return Ok(Value::Object(map));
    };
    match map.get("capability").and_then(Value::as_str) {
        Some(named) if named != capability.as_str() => Err(format!(
            "the case is a {named} call, not a {capability} one"
        )),
        _ => Ok(input),
    }
}

/// Call `capability` of `plugin` with `input`; the answer as JSON, or the error's text.
pub fn call(plugin: &Plugin, capability: Capability, input: Value) -> Result<Value, String> {
    match capability {
        Capability::Selector => {
            let input: SelectInput = parse(input)?;
            let candidates: Vec<types::Candidate> = input
                .candidates
                .into_iter()
                .map(|c| types::Candidate {
                    name: c.name,
                    weight: c.weight,
                    delay_ms: c.delay_ms,
                })
                .collect();
            let chosen = plugin
                .select(&super::convert::object_json(&input.object), &candidates)
                .map_err(|e| e.to_string())?;
            Ok(match chosen {
                Some(s) => json!({"stage": s.stage, "delayMs": s.delay_ms}),
                None => Value::Null,
            })
        }
        Capability::Renderer => {
            let input: RenderInput = parse(input)?;
            plugin
                .render(
                    &input.stage,
                    &input.template,
                    &super::convert::object_json(&input.object),
                )
                .map_err(|e| e.to_string())
        }
        Capability::Classifier => {
            let input: ClassifyInput = parse(input)?;
            let kind = convert::parse_failure_kind(&input.kind)
                .ok_or_else(|| format!("unknown failure kind {:?}", input.kind))?;
            let failure = types::Failure {
                kind: convert::failure_kind(kind),
                status: input.status,
                reason: input.reason,
                message: input.message,
                retry_after_ms: input.retry_after_ms,
                stage: input.stage,
                step: input.step,
                attempt: input.attempt,
                object: super::convert::object_json(&input.object),
            };
            let decision = plugin.classify(&failure).map_err(|e| e.to_string())?;
            Ok(decision_json(&decision))
        }
        Capability::Metadata => {
            let info = plugin.ping().map_err(|e| e.to_string())?;
            serde_json::to_value(info).map_err(|e| e.to_string())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_case_file_gives_its_input_and_must_be_for_the_capability_called() {
        let case = json!({
            "capability": "renderer",
            "input": {"stage": "s", "template": "{}", "object": {}},
            "expect": {},
        });
        assert_eq!(
            input_of(case.clone(), Capability::Renderer),
            Ok(json!({"stage": "s", "template": "{}", "object": {}}))
        );
        let wrong = input_of(case, Capability::Classifier).expect_err("another capability");
        assert!(
            wrong.contains("a renderer call, not a classifier one"),
            "{wrong}"
        );
        // A plain input is the input.
        let plain = json!({"stage": "s", "template": "{}", "object": {}});
        assert_eq!(input_of(plain.clone(), Capability::Renderer), Ok(plain));
    }
}
