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
            let text = plugin
                .render(
                    &input.stage,
                    &input.template,
                    &super::convert::object_json(&input.object),
                )
                .map_err(|e| e.to_string())?;
            serde_json::from_str(&text).map_err(|e| {
                let text = super::error::bounded_text(text.clone());
                format!("{}: rendered text is not JSON ({e}): {text}", plugin.name())
            })
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
