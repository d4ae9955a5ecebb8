//! What a Stage's steps send to the API server for one object: [`Action`]s.
//!
//! Rendering a step is pure: it reads the object and the compiled Stage and returns the
//! requests to send, without sending them. The engine's workers, `kstage stage explain`
//! and `kstage stage lint` all go through [`step_actions`], so they agree on what a step
//! does. It stands apart from the engine for that reason: explain and lint use it with
//! no engine, cluster or clock at all.

use serde_json::{Value, json};

use crate::decide::{RenderError, StepRenderer};
use crate::patch::{self, PatchError, PatchType};
use crate::stage::{Stage, Step};

/// One request a step sends.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Record an event on the object.
    Event {
        /// `Normal` or `Warning`.
        event_type: String,
        /// Machine-readable reason.
        reason: String,
        /// Human-readable message.
        message: String,
    },
    /// PATCH the object.
    Patch {
        /// Content type of the patch.
        patch_type: PatchType,
        /// The subresource, `None` for the object itself.
        subresource: Option<String>,
        /// The patch body.
        data: Value,
        /// The user to impersonate.
        impersonation: Option<String>,
    },
    /// Write a whole rendered object (server-side apply by default).
    Apply {
        /// How it is written.
        patch_type: PatchType,
        /// The subresource, `None` for the object itself.
        subresource: Option<String>,
        /// The rendered object, with `apiVersion`, `kind` and `metadata.name`.
        object: Value,
        /// The user to impersonate.
        impersonation: Option<String>,
    },
    /// DELETE the object (grace period 0).
    Delete,
}

impl Action {
    /// A one-line description: `event Normal/Created`, `patch status (strategic)`,
    /// `apply PersistentVolume pv-1`, `delete`.
    pub fn summary(&self) -> String {
        match self {
            Action::Event {
                event_type, reason, ..
            } => format!("event {event_type}/{reason}"),
            Action::Patch {
                patch_type,
                subresource,
                ..
            } => match subresource {
                Some(sub) => format!("patch {sub} ({})", patch_type.stage_name()),
                None => format!("patch ({})", patch_type.stage_name()),
            },
            Action::Apply {
                object,
                subresource,
                ..
            } => {
                let target = crate::cluster::ObjectKey::of(object)
                    .map_or_else(|| "?".to_owned(), |k| k.to_string());
                match subresource {
                    Some(sub) => format!("apply {target} {sub}"),
                    None => format!("apply {target}"),
                }
            }
            Action::Delete => "delete".to_owned(),
        }
    }

    /// `event`, `patch`, `apply` or `delete`.
    pub fn kind(&self) -> &'static str {
        match self {
            Action::Event { .. } => "event",
            Action::Patch { .. } => "patch",
            Action::Apply { .. } => "apply",
            Action::Delete => "delete",
        }
    }
}

/// How patch types default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Typing {
    /// Strategic merge patch for built-in kinds, merge patch for custom resources.
    #[default]
    Typed,
    /// Every object is unstructured, so the default is a merge patch (what KWOK's own
    /// golden tests see).
    Unstructured,
}

/// A step that could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    /// The template failed to render or its output is not YAML/JSON, or the renderer
    /// plugin failed.
    #[error("step {step} ({kind}): {source}")]
    Template {
        /// The step index.
        step: usize,
        /// The step kind.
        kind: &'static str,
        /// The cause.
        #[source]
        source: Box<RenderError>,
    },
    /// The rendered patch is malformed (e.g. a JSON patch that is not a list).
    #[error("step {step} ({kind}): {source}")]
    Patch {
        /// The step index.
        step: usize,
        /// The step kind.
        kind: &'static str,
        /// The cause.
        #[source]
        source: PatchError,
    },
    /// An apply template that does not render an object.
    #[error("step {step} (apply): rendered {found}, expected an object")]
    NotAnObject {
        /// The step index.
        step: usize,
        /// What it rendered.
        found: &'static str,
    },
}

impl StepError {
    /// Whether a plugin (not the Stage) failed.
    pub fn is_plugin(&self) -> bool {
        matches!(self, StepError::Template { source, .. } if matches!(**source, RenderError::Plugin(_)))
    }

    /// Whether an address range the template draws from is full (transient: addresses
    /// come back as pods go).
    pub fn is_exhausted(&self) -> bool {
        matches!(self, StepError::Template { source, .. } if matches!(
            **source,
            RenderError::Template(crate::template::TemplateError::AddressRangeExhausted { .. })
        ))
    }

    /// The index of the step that failed.
    pub fn step(&self) -> usize {
        match self {
            StepError::Template { step, .. }
            | StepError::Patch { step, .. }
            | StepError::NotAnObject { step, .. } => *step,
        }
    }
}

/// The actions of step `index` of `stage` for `object` (empty when the step has nothing
/// to send, e.g. finalizers already as wanted).
pub fn step_actions(
    stage: &Stage,
    index: usize,
    object: &Value,
    typing: Typing,
    renderer: &dyn StepRenderer,
) -> Result<Vec<Action>, StepError> {
    let Some(step) = stage.steps.get(index) else {
        return Ok(Vec::new());
    };
    let kind = step.kind();
    Ok(match step {
        Step::Event(e) => vec![Action::Event {
            event_type: e.type_.clone(),
            reason: e.reason.clone(),
            message: e.message.clone(),
        }],
        Step::Finalizers(change) => {
            let add: Vec<&str> = change.add.iter().map(|i| i.value.as_str()).collect();
            let remove: Vec<&str> = change.remove.iter().map(|i| i.value.as_str()).collect();
            let change = patch::FinalizerChange {
                add: &add,
                remove: &remove,
                empty: change.empty,
            };
            let ops = patch::finalizer_ops(&finalizers(object), &change);
            if ops.is_empty() {
                Vec::new()
            } else {
                vec![Action::Patch {
                    patch_type: PatchType::Json,
                    subresource: None,
                    data: Value::Array(ops),
                    impersonation: None,
                }]
            }
        }
        Step::Delete => vec![Action::Delete],
        Step::Patch(p) => {
            let rendered = render(renderer, stage, &p.template, object, index, kind)?;
            let patch_type = p.patch_type.unwrap_or_else(|| default_type(stage, typing));
            let data =
                patch::wrap_root(p.root.as_deref(), patch_type, rendered).map_err(|source| {
                    StepError::Patch {
                        step: index,
                        kind,
                        source,
                    }
                })?;
            vec![Action::Patch {
                patch_type,
                subresource: p.subresource.clone(),
                data,
                impersonation: p.impersonation.clone(),
            }]
        }
        Step::Apply(a) => {
            let mut rendered = render(renderer, stage, &a.template, object, index, kind)?;
            let Some(map) = rendered.as_object_mut() else {
                return Err(StepError::NotAnObject {
                    step: index,
                    found: type_name(&rendered),
                });
            };
            // An apply template may leave out what identifies the object: it then
            // means the object the Stage is playing.
            for field in ["apiVersion", "kind"] {
                if !map.contains_key(field) {
                    map.insert(
                        field.to_owned(),
                        object.get(field).cloned().unwrap_or(Value::Null),
                    );
                }
            }
            // The namespace only for a namespaced kind: a PersistentVolume applied for a
            // claim lives outside namespaces. Scopes known here are the built-in kinds';
            // the cluster drops a namespace from kinds it knows to be cluster-scoped (a
            // CRD's scope, discovery).
            let scoped = !crate::cluster::is_cluster_scoped(
                map.get("apiVersion").and_then(Value::as_str).unwrap_or(""),
                map.get("kind").and_then(Value::as_str).unwrap_or(""),
            );
            let meta = map.entry("metadata").or_insert_with(|| json!({}));
            if let Some(meta) = meta.as_object_mut() {
                for field in ["name", "namespace"] {
                    if field == "namespace" && !scoped {
                        continue;
                    }
                    if !meta.contains_key(field)
                        && let Some(v) = object.pointer(&format!("/metadata/{field}"))
                    {
                        meta.insert(field.to_owned(), v.clone());
                    }
                }
            }
            vec![Action::Apply {
                patch_type: a.patch_type,
                subresource: a.subresource.clone(),
                object: rendered,
                impersonation: a.impersonation.clone(),
            }]
        }
    })
}

fn render(
    renderer: &dyn StepRenderer,
    stage: &Stage,
    template: &crate::template::Template,
    object: &Value,
    step: usize,
    kind: &'static str,
) -> Result<Value, StepError> {
    renderer
        .render(stage, template, object)
        .map_err(|source| StepError::Template {
            step,
            kind,
            source: Box::new(source),
        })
}

/// The actions of every step of `stage` rendered against the same `object`, in order,
/// with KWOK's rule that after a delete only events are still sent. Each action is paired
/// with the index of its step.
pub fn stage_actions(
    stage: &Stage,
    object: &Value,
    typing: Typing,
    renderer: &dyn StepRenderer,
) -> Result<Vec<(usize, Action)>, StepError> {
    let mut out = Vec::new();
    let mut deleted = false;
    for (index, step) in stage.steps.iter().enumerate() {
        if deleted && !matches!(step, Step::Event(_)) {
            continue;
        }
        for action in step_actions(stage, index, object, typing, renderer)? {
            deleted |= matches!(action, Action::Delete);
            out.push((index, action));
        }
    }
    Ok(out)
}

/// The patch type a patch step without `type` gets.
pub fn default_type(stage: &Stage, typing: Typing) -> PatchType {
    match typing {
        Typing::Unstructured => PatchType::Merge,
        Typing::Typed => patch::default_patch_type(&stage.resource.api_group, &stage.resource.kind),
    }
}

/// `metadata.finalizers` of an object.
pub fn finalizers(object: &Value) -> Vec<String> {
    object
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}
