//! `kstage stage explain`: which Stages match an object and exactly what each would send.
//!
//! [`explain`] computes an [`Explanation`] (the data); [`Explanation::to_kwok_golden`]
//! renders it in KWOK's golden-test format and [`Explanation::to_text`] for people.

use std::fmt::Write as _;

use chrono::{DateTime, Utc};
use serde_json::{Map, Value, json};

use crate::action::{self, Action, StepError, Typing};
use crate::patch;
use crate::stage::value::DelayRange;
use crate::stage::{Origin, StageSet};

/// How to compute the explanation.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// The time delays are computed against.
    pub now: DateTime<Utc>,
    /// How patch types default.
    pub typing: Typing,
    /// Mark patches that would not change the object (each step sees the object as the
    /// previous steps left it). KWOK's golden format lists every patch, so it is off there.
    pub detect_noop: bool,
}

/// Every Stage that could be played next for one object.
#[derive(Debug, Clone)]
pub struct Explanation {
    /// The object's `apiVersion`.
    pub api_group: String,
    /// The object's `kind`.
    pub kind: String,
    /// The object's name.
    pub name: String,
    /// The object's namespace, if any.
    pub namespace: Option<String>,
    /// The candidate Stages, in load order.
    pub stages: Vec<StageExplanation>,
}

/// One candidate Stage.
#[derive(Debug, Clone)]
pub struct StageExplanation {
    /// The Stage's name.
    pub name: String,
    /// Where it was loaded from.
    pub origin: Origin,
    /// Its weight for this object, unless `weightFrom` failed.
    pub weight: Option<i64>,
    /// Its delay range for this object; `None` is no delay.
    pub delay: Option<DelayRange>,
    /// The actions, with the step they come from and whether they would change nothing.
    pub actions: Vec<PlannedAction>,
    /// Whether the next Stage is matched right after this one.
    pub immediate_next_stage: bool,
}

/// One action of a Stage.
#[derive(Debug, Clone)]
pub struct PlannedAction {
    /// The index of the step it comes from.
    pub step: usize,
    /// The request.
    pub action: Action,
    /// True when the patch would not change the object, so kstage does not send it.
    pub noop: bool,
}

/// Explain `object` against `stages`. Fails if a matching Stage's step cannot render.
pub fn explain(
    stages: &StageSet,
    object: &Value,
    options: Options,
) -> Result<Explanation, (String, StepError)> {
    let meta = |field: &str| {
        object
            .pointer(&format!("/metadata/{field}"))
            .and_then(Value::as_str)
            .map(str::to_owned)
    };
    let mut out = Explanation {
        api_group: str_field(object, "apiVersion"),
        kind: str_field(object, "kind"),
        name: meta("name").unwrap_or_default(),
        namespace: meta("namespace").filter(|n| !n.is_empty()),
        stages: Vec::new(),
    };
    for stage in stages.possible(object) {
        let actions = action::stage_actions(stage, object, options.typing, &crate::decide::Builtin)
            .map_err(|e| (stage.name.clone(), e))?;
        let mut current = object.clone();
        let mut planned = Vec::with_capacity(actions.len());
        for (step, action) in actions {
            let mut noop = false;
            if options.detect_noop
                && let Action::Patch {
                    patch_type, data, ..
                } = &action
            {
                match patch::apply(&current, *patch_type, data, &out.kind) {
                    Ok(next) => {
                        noop = next == current;
                        current = next;
                    }
                    Err(source) => {
                        return Err((
                            stage.name.clone(),
                            StepError::Patch {
                                step,
                                kind: "patch",
                                source,
                            },
                        ));
                    }
                }
            }
            planned.push(PlannedAction { step, action, noop });
        }
        out.stages.push(StageExplanation {
            name: stage.name.clone(),
            origin: stage.origin.clone(),
            weight: stage.weight.get(object),
            delay: stage
                .delay
                .as_ref()
                .and_then(|d| d.range(object, options.now)),
            actions: planned,
            immediate_next_stage: stage.immediate_next_stage,
        });
    }
    Ok(out)
}

fn str_field(object: &Value, field: &str) -> String {
    object
        .get(field)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

fn nanos(d: chrono::TimeDelta) -> Value {
    json!(d.num_nanoseconds().unwrap_or(i64::MAX))
}

impl Explanation {
    /// KWOK's golden-test format (see the corpus README): delays in nanoseconds, actions
    /// under `next`, patch types as content types.
    pub fn to_kwok_golden(&self) -> Value {
        let mut out = Map::new();
        out.insert("apiGroup".into(), json!(self.api_group));
        out.insert("kind".into(), json!(self.kind));
        out.insert("name".into(), json!(self.name));
        if let Some(ns) = &self.namespace {
            out.insert("namespace".into(), json!(ns));
        }
        let stages = self
            .stages
            .iter()
            .map(|s| {
                let mut stage = Map::new();
                stage.insert("stage".into(), json!(s.name));
                if let Some(delay) = &s.delay {
                    let mut range = vec![nanos(delay.min)];
                    range.extend(delay.max.map(nanos));
                    stage.insert("delay".into(), Value::Array(range));
                }
                if let Some(w) = s.weight {
                    stage.insert("weight".into(), json!(w));
                }
                let mut next: Vec<Value> =
                    s.actions.iter().map(|a| golden_action(&a.action)).collect();
                if s.immediate_next_stage {
                    next.push(json!({"kind": "immediate"}));
                }
                stage.insert("next".into(), Value::Array(next));
                Value::Object(stage)
            })
            .collect();
        out.insert("stages".into(), Value::Array(stages));
        Value::Object(out)
    }

    /// A readable report.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let ns = self
            .namespace
            .as_deref()
            .map(|n| format!("{n}/"))
            .unwrap_or_default();
        let _ = writeln!(
            s,
            "{} {}{} ({}): {} matching Stage{}",
            self.kind,
            ns,
            self.name,
            self.api_group,
            self.stages.len(),
            if self.stages.len() == 1 { "" } else { "s" }
        );
        for stage in &self.stages {
            let weight = stage.weight.map_or("-".to_owned(), |w| w.to_string());
            let delay = match &stage.delay {
                None => "none".to_owned(),
                Some(DelayRange { min, max: None }) => human(*min),
                Some(DelayRange {
                    min,
                    max: Some(max),
                }) => format!("{} .. {}", human(*min), human(*max)),
            };
            let _ = writeln!(
                s,
                "\nStage {}  weight {weight}  delay {delay}  ({})",
                stage.name, stage.origin
            );
            if stage.actions.is_empty() {
                let _ = writeln!(s, "  (no actions)");
            }
            for (i, planned) in stage.actions.iter().enumerate() {
                let noop = if planned.noop {
                    "  [no-op: not sent]"
                } else {
                    ""
                };
                let _ = writeln!(
                    s,
                    "  {}. step {}: {}{noop}",
                    i + 1,
                    planned.step,
                    headline(&planned.action)
                );
                if let Some(body) = body(&planned.action) {
                    let text = serde_json::to_string_pretty(body).unwrap_or_default();
                    for line in text.lines() {
                        let _ = writeln!(s, "       {line}");
                    }
                }
            }
            if stage.immediate_next_stage {
                let _ = writeln!(s, "  then: the next Stage is matched immediately");
            }
        }
        s
    }
}

fn headline(action: &Action) -> String {
    match action {
        Action::Event {
            event_type,
            reason,
            message,
        } => format!("event {event_type} {reason}: {message:?}"),
        Action::Patch {
            patch_type,
            subresource,
            impersonation,
            ..
        }
        | Action::Apply {
            patch_type,
            subresource,
            impersonation,
            ..
        } => {
            let mut h = format!("{} {}", action.kind(), patch_type.content_type());
            if let Some(sub) = subresource {
                let _ = write!(h, " subresource={sub}");
            }
            if let Some(user) = impersonation {
                let _ = write!(h, " as={user}");
            }
            h
        }
        Action::Delete => "delete".to_owned(),
    }
}

fn body(action: &Action) -> Option<&Value> {
    match action {
        Action::Patch { data, .. } => Some(data),
        Action::Apply { object, .. } => Some(object),
        _ => None,
    }
}

fn golden_action(action: &Action) -> Value {
    match action {
        Action::Event {
            event_type,
            reason,
            message,
        } => json!({"kind": "event", "type": event_type, "reason": reason, "message": message}),
        Action::Delete => json!({"kind": "delete"}),
        Action::Patch {
            patch_type,
            subresource,
            data,
            impersonation,
        }
        | Action::Apply {
            patch_type,
            subresource,
            object: data,
            impersonation,
        } => {
            let mut m = Map::new();
            m.insert("kind".into(), json!(action.kind()));
            m.insert("type".into(), json!(patch_type.content_type()));
            if let Some(sub) = subresource {
                m.insert("subresource".into(), json!(sub));
            }
            m.insert("data".into(), data.clone());
            if let Some(user) = impersonation {
                m.insert("impersonation".into(), json!(user));
            }
            Value::Object(m)
        }
    }
}

/// A duration as Go prints it (`1.5s`, `250ms`, `2m30s`), as KWOK's users read them.
pub fn human(d: chrono::TimeDelta) -> String {
    crate::go::format_go_duration(d.num_nanoseconds().unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::human;
    use chrono::TimeDelta;

    #[test]
    fn human_durations() {
        assert_eq!(human(TimeDelta::milliseconds(250)), "250ms");
        assert_eq!(human(TimeDelta::milliseconds(1500)), "1.5s");
        assert_eq!(human(TimeDelta::seconds(150)), "2m30s");
        assert_eq!(human(TimeDelta::seconds(3600)), "1h0m0s");
        assert_eq!(human(TimeDelta::seconds(-3)), "-3s");
        assert_eq!(human(TimeDelta::zero()), "0s");
    }
}
