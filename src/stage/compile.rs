//! Compiling a wire [`v1alpha1::Stage`] into a [`Stage`]: validation, program
//! compilation, template parsing and the `spec.next` → steps conversion.

use super::selector::Selector;
use super::v1alpha1;
use super::value::{Delay, IntFrom};
use super::{ApplyStep, FieldError, Origin, PatchStep, ResourceRef, Stage, Step};
use crate::patch::PatchType;
use crate::template::{Renderer, Template};

/// Compile a Stage. Returns every problem found, not just the first, each naming its field.
///
/// A Stage without a selector compiles (it is inert: it never matches), as in KWOK.
pub fn compile(
    wire: &v1alpha1::Stage,
    origin: Origin,
    renderer: &Renderer,
) -> Result<Stage, Vec<FieldError>> {
    let mut errors = Vec::new();
    let name = wire.metadata.name.clone();
    if name.is_empty() {
        errors.push(FieldError::new("metadata.name", "must not be empty"));
    }
    let spec = &wire.spec;
    if spec.resource_ref.kind.is_empty() {
        errors.push(FieldError::new(
            "spec.resourceRef.kind",
            "must not be empty",
        ));
    }
    let api_group = if spec.resource_ref.api_group.is_empty() {
        // KWOK defaults an empty apiGroup to the core group.
        "v1".to_owned()
    } else {
        spec.resource_ref.api_group.clone()
    };

    // The programs name their Stage in what they report (an overrun of their budget).
    let (selector, weight, delay) = super::expr::in_stage(&name, || {
        let selector = match &spec.selector {
            Some(s) => Selector::compile(s, "spec.selector")
                .map_err(|e| errors.extend(e))
                .ok(),
            None => Some(Selector::never()),
        };
        if spec.weight < 0 {
            errors.push(FieldError::new("spec.weight", "must not be negative"));
        }
        let weight = IntFrom::compile(spec.weight, spec.weight_from.as_ref(), "spec.weightFrom")
            .map_err(|e| errors.push(e))
            .ok();
        let delay = Delay::compile(spec.delay.as_ref(), "spec.delay")
            .map_err(|e| errors.extend(e))
            .ok();
        (selector, weight, delay)
    });

    let mut steps = Vec::new();
    match (&spec.steps, &spec.next) {
        (Some(wire_steps), next) => {
            if next.is_some() {
                errors.push(FieldError::new(
                    "spec.next",
                    "set together with spec.steps; use only one (spec.next is deprecated)",
                ));
            }
            for (i, step) in wire_steps.iter().enumerate() {
                compile_step(
                    step,
                    &format!("spec.steps[{i}]"),
                    &name,
                    renderer,
                    &mut steps,
                    &mut errors,
                );
            }
        }
        (None, Some(next)) => compile_next(next, &name, renderer, &mut steps, &mut errors),
        (None, None) => {}
    }

    let (Some(selector), Some(weight), Some(delay)) = (selector, weight, delay) else {
        return Err(errors);
    };
    if !errors.is_empty() {
        return Err(errors);
    }
    Ok(Stage {
        name,
        annotations: wire.metadata.annotations.clone(),
        resource: ResourceRef {
            api_group,
            kind: spec.resource_ref.kind.clone(),
        },
        selector,
        weight,
        delay,
        steps,
        immediate_next_stage: spec.immediate_next_stage,
        origin,
    })
}

fn compile_step(
    step: &v1alpha1::StageStep,
    path: &str,
    stage: &str,
    renderer: &Renderer,
    steps: &mut Vec<Step>,
    errors: &mut Vec<FieldError>,
) {
    let before = steps.len();
    if let Some(event) = &step.event {
        push_event(event, &format!("{path}.event"), steps, errors);
    }
    if let Some(finalizers) = &step.finalizers {
        push_finalizers(finalizers, &format!("{path}.finalizers"), steps, errors);
    }
    if step.delete == Some(true) {
        steps.push(Step::Delete);
    }
    if let Some(patch) = &step.patch
        && let Some(s) = compile_patch(patch, &format!("{path}.patch"), stage, renderer, errors)
    {
        steps.push(Step::Patch(s));
    }
    if let Some(apply) = &step.apply
        && let Some(s) = compile_apply(apply, &format!("{path}.apply"), stage, renderer, errors)
    {
        steps.push(Step::Apply(s));
    }
    let set = [
        step.event.is_some(),
        step.finalizers.is_some(),
        step.delete.is_some(),
        step.patch.is_some(),
        step.apply.is_some(),
    ]
    .iter()
    .filter(|s| **s)
    .count();
    if set == 0 {
        errors.push(FieldError::new(
            path,
            "empty step: set one of event, finalizers, delete, patch, apply",
        ));
    } else if set > 1 && steps.len() > before {
        tracing::debug!(
            stage,
            path,
            "step sets several actions; they run in KWOK's order"
        );
    }
}

/// KWOK's conversion of the legacy `spec.next`: event, finalizers, each patch, the
/// status template (a patch rooted at `status` on the status subresource), delete.
fn compile_next(
    next: &v1alpha1::StageNext,
    stage: &str,
    renderer: &Renderer,
    steps: &mut Vec<Step>,
    errors: &mut Vec<FieldError>,
) {
    if let Some(event) = &next.event {
        push_event(event, "spec.next.event", steps, errors);
    }
    if let Some(finalizers) = &next.finalizers {
        push_finalizers(finalizers, "spec.next.finalizers", steps, errors);
    }
    for (i, patch) in next.patches.iter().flatten().enumerate() {
        let path = format!("spec.next.patches[{i}]");
        if let Some(s) = compile_patch(patch, &path, stage, renderer, errors) {
            steps.push(Step::Patch(s));
        }
    }
    if let Some(template) = &next.status_template {
        let subresource = match next.status_subresource.as_deref() {
            None => Some("status".to_owned()),
            Some("") => None,
            Some(s) => Some(s.to_owned()),
        };
        let patch = v1alpha1::StagePatch {
            subresource,
            root: Some("status".to_owned()),
            template: template.clone(),
            type_: None,
            impersonation: next.status_patch_as.clone(),
        };
        if let Some(s) = compile_patch(&patch, "spec.next.statusTemplate", stage, renderer, errors)
        {
            steps.push(Step::Patch(s));
        }
    }
    if next.delete {
        steps.push(Step::Delete);
    }
}

fn push_event(
    event: &v1alpha1::StageEvent,
    path: &str,
    steps: &mut Vec<Step>,
    errors: &mut Vec<FieldError>,
) {
    match event.type_.as_str() {
        "Normal" | "Warning" => {}
        other => errors.push(FieldError::new(
            format!("{path}.type"),
            format!("must be Normal or Warning, not {other:?}"),
        )),
    }
    if event.reason.is_empty() {
        errors.push(FieldError::new(
            format!("{path}.reason"),
            "must not be empty",
        ));
    }
    steps.push(Step::Event(event.clone()));
}

fn push_finalizers(
    finalizers: &v1alpha1::StageFinalizers,
    path: &str,
    steps: &mut Vec<Step>,
    errors: &mut Vec<FieldError>,
) {
    for (field, items) in [("add", &finalizers.add), ("remove", &finalizers.remove)] {
        for (i, item) in items.iter().enumerate() {
            if item.value.is_empty() {
                errors.push(FieldError::new(
                    format!("{path}.{field}[{i}].value"),
                    "must not be empty",
                ));
            }
        }
    }
    steps.push(Step::Finalizers(finalizers.clone()));
}

fn parse_template(
    src: &str,
    path: &str,
    stage: &str,
    renderer: &Renderer,
    errors: &mut Vec<FieldError>,
) -> Option<Template> {
    renderer
        .parse(&format!("{stage}/{path}"), src)
        .map_err(|e| errors.push(FieldError::new(path, e)))
        .ok()
}

fn parse_type(
    name: Option<&str>,
    path: &str,
    allowed: &[PatchType],
    errors: &mut Vec<FieldError>,
) -> Option<Option<PatchType>> {
    let Some(name) = name.filter(|n| !n.is_empty()) else {
        return Some(None);
    };
    match PatchType::from_stage_name(name) {
        Some(t) if allowed.contains(&t) => Some(Some(t)),
        _ => {
            let names: Vec<&str> = allowed.iter().map(|t| t.stage_name()).collect();
            errors.push(FieldError::new(
                path,
                format!(
                    "unknown type {name:?}: expected one of {}",
                    names.join(", ")
                ),
            ));
            None
        }
    }
}

fn compile_patch(
    patch: &v1alpha1::StagePatch,
    path: &str,
    stage: &str,
    renderer: &Renderer,
    errors: &mut Vec<FieldError>,
) -> Option<PatchStep> {
    let patch_type = parse_type(
        patch.type_.as_deref(),
        &format!("{path}.type"),
        &[PatchType::Json, PatchType::Merge, PatchType::Strategic],
        errors,
    );
    let template = parse_template(
        &patch.template,
        &format!("{path}.template"),
        stage,
        renderer,
        errors,
    );
    Some(PatchStep {
        subresource: patch.subresource.clone().filter(|s| !s.is_empty()),
        root: patch.root.clone().filter(|s| !s.is_empty()),
        template: template?,
        patch_type: patch_type?,
        impersonation: patch.impersonation.as_ref().map(|i| i.username.clone()),
    })
}

fn compile_apply(
    apply: &v1alpha1::StageApply,
    path: &str,
    stage: &str,
    renderer: &Renderer,
    errors: &mut Vec<FieldError>,
) -> Option<ApplyStep> {
    let patch_type = parse_type(
        apply.type_.as_deref(),
        &format!("{path}.type"),
        &[PatchType::Apply, PatchType::Merge, PatchType::Strategic],
        errors,
    );
    let template = parse_template(
        &apply.template,
        &format!("{path}.template"),
        stage,
        renderer,
        errors,
    );
    Some(ApplyStep {
        subresource: apply.subresource.clone().filter(|s| !s.is_empty()),
        template: template?,
        patch_type: patch_type?.unwrap_or(PatchType::Apply),
        impersonation: apply.impersonation.as_ref().map(|i| i.username.clone()),
    })
}
