//! The status kstage writes on the Stage resources it plays: a `Compiled` condition and
//! `observedGeneration`, so `kubectl get stages` shows a broken Stage without the
//! daemon's log.
//!
//! - `Compiled=True`, reason `Compiled`: the Stage is in play.
//! - `Compiled=False`, reason `Invalid`: it does not compile; the message is each problem
//!   as `kstage stage lint` prints it (`field: cause`), joined by `; `.
//! - `Compiled=False`, reason `UnknownPlugin`: it compiles, but a `kstage.dev/<capability>`
//!   annotation names a plugin no configured plugin provides (its decisions would fail).
//!
//! A write is a JSON merge patch of the status subresource carrying the object's
//! `resourceVersion` as a precondition, made only when the status does not already say
//! the same (same generation, condition status, reason and message): replicas reading
//! the same Stage compute the same status, so the first one writes, the others find it
//! written (or lose the precondition and see the written version next). The condition's
//! `lastTransitionTime` moves only when its status flips, as Kubernetes' conventions ask.

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Value, json};

use crate::plugin::Capability;
use crate::stage::{FieldError, Stage};

/// The condition type.
pub const COMPILED: &str = "Compiled";

/// Messages longer than this are cut (Kubernetes allows 32 KiB; a status is read by
/// people).
const MAX_MESSAGE: usize = 4096;

/// What the `Compiled` condition says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compiled {
    /// `True` or `False`.
    pub ok: bool,
    /// CamelCase reason.
    pub reason: &'static str,
    /// For people.
    pub message: String,
}

impl Compiled {
    /// The Stage compiled and is in play.
    pub fn valid(stage: &Stage) -> Self {
        Self {
            ok: true,
            reason: "Compiled",
            message: format!(
                "in play for {} {}",
                stage.resource.api_group, stage.resource.kind
            ),
        }
    }

    /// The Stage does not compile.
    pub fn invalid(problems: &[FieldError]) -> Self {
        let list: Vec<String> = problems.iter().map(ToString::to_string).collect();
        Self {
            ok: false,
            reason: "Invalid",
            message: list.join("; "),
        }
    }

    /// The Stage's plugin annotations name plugins nobody provides (`known` says which
    /// names a configured plugin has); `None` when every one is known or `builtin`.
    pub fn unknown_plugins(stage: &Stage, known: &dyn Fn(&str) -> bool) -> Option<Self> {
        let unknown: Vec<String> = Capability::DECISIONS
            .iter()
            .filter_map(|c| {
                let name = stage.annotations.get(c.annotation())?;
                (name != "builtin" && !known(name)).then(|| {
                    format!(
                        "metadata.annotations.{}: no configured plugin is named {name:?}",
                        c.annotation()
                    )
                })
            })
            .collect();
        (!unknown.is_empty()).then(|| Self {
            ok: false,
            reason: "UnknownPlugin",
            message: unknown.join("; "),
        })
    }
}

fn cut(mut message: String) -> String {
    if message.len() > MAX_MESSAGE {
        let mut end = MAX_MESSAGE;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
        message.push_str(" …");
    }
    message
}

/// One condition to write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    /// Its `type`.
    pub kind: &'static str,
    /// `True` or `False`; `None`: `Unknown`.
    pub ok: Option<bool>,
    /// CamelCase reason.
    pub reason: String,
    /// For people (cut at 4 KiB).
    pub message: String,
}

impl Condition {
    fn status(&self) -> &'static str {
        match self.ok {
            Some(true) => "True",
            Some(false) => "False",
            None => "Unknown",
        }
    }
}

/// The merge patch of `object`'s status subresource that makes it say `compiled`, or
/// `None` when it already does. Other condition types are kept as they are.
pub fn patch(object: &Value, compiled: &Compiled, now: DateTime<Utc>) -> Option<Value> {
    let condition = Condition {
        kind: COMPILED,
        ok: Some(compiled.ok),
        reason: compiled.reason.to_owned(),
        message: compiled.message.clone(),
    };
    patch_status(object, &[condition], &serde_json::Map::new(), now)
}

/// The merge patch of `object`'s status subresource that makes its conditions of the
/// types in `wanted` say what they say and its top-level status `fields` hold their
/// values (with `observedGeneration`), or `None` when it already does. Conditions of
/// other types are kept as they are.
pub fn patch_status(
    object: &Value,
    wanted: &[Condition],
    fields: &serde_json::Map<String, Value>,
    now: DateTime<Utc>,
) -> Option<Value> {
    let generation = object.pointer("/metadata/generation").cloned();
    let conditions = object
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let current = |kind: &str| conditions.iter().find(|c| c["type"] == kind);
    let said = |w: &Condition| {
        current(w.kind).is_some_and(|c| {
            c["status"] == w.status()
                && c["reason"] == w.reason.as_str()
                && c["message"] == cut(w.message.clone()).as_str()
        })
    };
    let status = object.get("status");
    let same_fields = fields
        .iter()
        .all(|(k, v)| status.and_then(|s| s.get(k)) == Some(v));
    let observed = object.pointer("/status/observedGeneration").cloned();
    if wanted.iter().all(said) && same_fields && observed == generation {
        return None;
    }
    let written: Vec<Value> = wanted
        .iter()
        .map(|w| {
            let since = current(w.kind)
                .filter(|c| c["status"] == w.status())
                .and_then(|c| c.get("lastTransitionTime").cloned())
                .unwrap_or_else(|| json!(now.to_rfc3339_opts(SecondsFormat::Secs, true)));
            let mut condition = json!({
                "type": w.kind,
                "status": w.status(),
                "reason": w.reason,
                "message": cut(w.message.clone()),
                "lastTransitionTime": since,
            });
            if let Some(g) = &generation {
                condition["observedGeneration"] = g.clone();
            }
            condition
        })
        .collect();
    let conditions: Vec<Value> = conditions
        .iter()
        .filter(|c| !wanted.iter().any(|w| c["type"] == w.kind))
        .cloned()
        .chain(written)
        .collect();
    let mut status = json!({"conditions": conditions});
    for (k, v) in fields {
        status[k] = v.clone();
    }
    if let Some(g) = generation {
        status["observedGeneration"] = g;
    }
    let mut patch = json!({"status": status});
    if let Some(rv) = object.pointer("/metadata/resourceVersion") {
        patch["metadata"] = json!({"resourceVersion": rv});
    }
    Some(patch)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-01-02T03:04:05Z")
            .expect("time")
            .with_timezone(&Utc)
    }

    fn invalid() -> Compiled {
        Compiled::invalid(&[FieldError::new("spec.selector", "bad jq")])
    }

    #[test]
    fn a_first_status_carries_the_generation_and_the_precondition() {
        let object = json!({"metadata": {"name": "s", "generation": 3, "resourceVersion": "17"}});
        let patch = patch(&object, &invalid(), now()).expect("a write");
        assert_eq!(patch["metadata"]["resourceVersion"], "17");
        assert_eq!(patch["status"]["observedGeneration"], 3);
        let c = &patch["status"]["conditions"][0];
        assert_eq!(c["type"], "Compiled");
        assert_eq!(c["status"], "False");
        assert_eq!(c["reason"], "Invalid");
        assert_eq!(c["message"], "spec.selector: bad jq");
        assert_eq!(c["lastTransitionTime"], "2026-01-02T03:04:05Z");
    }

    #[test]
    fn no_write_when_the_status_already_says_the_same() {
        let object = json!({"metadata": {"name": "s", "generation": 3, "resourceVersion": "17"}});
        let mut written = object.clone();
        written["status"] = patch(&object, &invalid(), now()).expect("a write")["status"].clone();
        assert_eq!(patch(&written, &invalid(), now()), None);
        // A new generation is observed even when the condition stays.
        written["metadata"]["generation"] = json!(4);
        let again = patch(&written, &invalid(), now()).expect("a write");
        assert_eq!(again["status"]["observedGeneration"], 4);
    }

    #[test]
    fn the_transition_time_moves_only_when_the_status_flips() {
        let mut object = json!({"metadata": {"name": "s", "generation": 1}, "status": {
            "conditions": [
                {"type": "Other", "status": "True"},
                {"type": "Compiled", "status": "False", "reason": "Invalid", "message": "old",
                 "lastTransitionTime": "2020-01-01T00:00:00Z"},
            ]
        }});
        let p = patch(&object, &invalid(), now()).expect("message changed");
        let conditions = p["status"]["conditions"].as_array().expect("list");
        assert_eq!(conditions.len(), 2, "other conditions kept: {conditions:?}");
        assert_eq!(conditions[0]["type"], "Other");
        assert_eq!(conditions[1]["lastTransitionTime"], "2020-01-01T00:00:00Z");
        object["status"]["conditions"][1]["message"] = json!("spec.selector: bad jq");
        let fixed = Compiled {
            ok: true,
            reason: "Compiled",
            message: "in play".into(),
        };
        let p = patch(&object, &fixed, now()).expect("flipped");
        assert_eq!(
            p["status"]["conditions"][1]["lastTransitionTime"],
            "2026-01-02T03:04:05Z"
        );
    }

    #[test]
    fn long_messages_are_cut_on_a_character_boundary() {
        let problems = vec![FieldError::new("spec", "é".repeat(MAX_MESSAGE))];
        let object = json!({"metadata": {"name": "s"}});
        let compiled = Compiled::invalid(&problems);
        let written = patch(&object, &compiled, now()).expect("a write");
        let message = written["status"]["conditions"][0]["message"]
            .as_str()
            .expect("message")
            .to_owned();
        assert!(
            message.len() <= MAX_MESSAGE + " …".len(),
            "{}",
            message.len()
        );
        assert!(message.ends_with(" …"));
        let mut object = object;
        object["status"] = written["status"].clone();
        assert_eq!(
            patch(&object, &compiled, now()),
            None,
            "a cut message is the same"
        );
    }
}
