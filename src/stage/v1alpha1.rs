//! The wire format of `kwok.x-k8s.io/v1alpha1` `Stage`, as KWOK serves it.
//!
//! These types only deserialize; [`super::compile`] turns them into the validated,
//! compiled [`super::Stage`] the engine uses. Field names follow KWOK's
//! `stage_types.go` so a Stage written for KWOK loads unchanged.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The API version of the Stage resource.
pub const API_VERSION: &str = "kwok.x-k8s.io/v1alpha1";
/// The kind of the Stage resource.
pub const KIND: &str = "Stage";

/// A KWOK `Stage` document.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Stage {
    /// `kwok.x-k8s.io/v1alpha1`.
    #[serde(default)]
    pub api_version: String,
    /// `Stage`.
    #[serde(default)]
    pub kind: String,
    /// Object metadata; only `name` and `annotations` are used.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// The Stage itself.
    pub spec: StageSpec,
}

/// The part of `metadata` a Stage uses.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectMeta {
    /// The Stage's name.
    #[serde(default)]
    pub name: String,
    /// Annotations (kstage reads `kstage.dev/*` ones for plugin bindings).
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
    /// Labels.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

/// `spec` of a Stage.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StageSpec {
    /// Which resource this Stage applies to.
    pub resource_ref: ResourceRef,
    /// Which objects of that resource match; a Stage without one is inert.
    #[serde(default)]
    pub selector: Option<StageSelector>,
    /// Relative weight when several Stages match.
    #[serde(default)]
    pub weight: i64,
    /// An expression overriding `weight`.
    #[serde(default)]
    pub weight_from: Option<ExpressionFrom>,
    /// How long to wait before playing the Stage.
    #[serde(default)]
    pub delay: Option<StageDelay>,
    /// Legacy form of `steps` (deprecated in KWOK, still supported).
    #[serde(default)]
    pub next: Option<StageNext>,
    /// The ordered steps of the Stage.
    #[serde(default)]
    pub steps: Option<Vec<StageStep>>,
    /// Re-match the object returned by the last write right away.
    #[serde(default)]
    pub immediate_next_stage: bool,
}

/// `spec.resourceRef`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceRef {
    /// A group/version string, `v1` for the core group (KWOK's naming).
    #[serde(default)]
    pub api_group: String,
    /// The kind, e.g. `Pod`.
    pub kind: String,
}

/// `spec.selector`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StageSelector {
    /// Labels that must all be present with these values.
    #[serde(default)]
    pub match_labels: Option<BTreeMap<String, String>>,
    /// Annotations that must all be present with these values.
    #[serde(default)]
    pub match_annotations: Option<BTreeMap<String, String>>,
    /// Expressions (jq requirements or CEL conditions) that must all hold.
    #[serde(default)]
    pub match_expressions: Option<Vec<SelectorExpression>>,
}

/// One item of `matchExpressions`: the legacy inline jq form (`key`, `operator`,
/// `values`), an explicit `jq` requirement, or a `cel` condition.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SelectorExpression {
    /// jq key (legacy inline form).
    #[serde(default)]
    pub key: Option<String>,
    /// Operator (legacy inline form).
    #[serde(default)]
    pub operator: Option<String>,
    /// Values (legacy inline form).
    #[serde(default)]
    pub values: Option<Vec<String>>,
    /// An explicit jq requirement.
    #[serde(default)]
    pub jq: Option<SelectorJq>,
    /// A CEL condition.
    #[serde(default)]
    pub cel: Option<ExpressionCel>,
}

/// A jq requirement: the outputs of `key` compared with `values` by `operator`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SelectorJq {
    /// The jq program.
    pub key: String,
    /// `In`, `NotIn`, `Exists` or `DoesNotExist`.
    pub operator: String,
    /// Values for `In` and `NotIn`.
    #[serde(default)]
    pub values: Option<Vec<String>>,
}

/// A CEL expression; `self` is the object.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExpressionCel {
    /// The CEL source.
    pub expression: String,
}

/// A jq expression.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExpressionJq {
    /// The jq source.
    pub expression: String,
}

/// Where a value comes from: a jq program (`expressionFrom`, or `jq`) or CEL.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExpressionFrom {
    /// A jq program (legacy form).
    #[serde(default)]
    pub expression_from: Option<String>,
    /// A jq program.
    #[serde(default)]
    pub jq: Option<ExpressionJq>,
    /// A CEL program.
    #[serde(default)]
    pub cel: Option<ExpressionCel>,
}

/// `spec.delay`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StageDelay {
    /// Base delay.
    #[serde(default)]
    pub duration_milliseconds: Option<i64>,
    /// An expression overriding the base delay.
    #[serde(default)]
    pub duration_from: Option<ExpressionFrom>,
    /// Upper bound of the delay when larger than the base delay.
    #[serde(default)]
    pub jitter_duration_milliseconds: Option<i64>,
    /// An expression overriding the jitter bound.
    #[serde(default)]
    pub jitter_duration_from: Option<ExpressionFrom>,
}

/// Legacy `spec.next`.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StageNext {
    /// An event to emit.
    #[serde(default)]
    pub event: Option<StageEvent>,
    /// Finalizers to change.
    #[serde(default)]
    pub finalizers: Option<StageFinalizers>,
    /// Delete the object.
    #[serde(default)]
    pub delete: bool,
    /// Patches to send.
    #[serde(default)]
    pub patches: Option<Vec<StagePatch>>,
    /// A template for the status, sent as a patch rooted at `status`.
    #[serde(default)]
    pub status_template: Option<String>,
    /// The subresource of the status patch (default `status`).
    #[serde(default)]
    pub status_subresource: Option<String>,
    /// Impersonation for the status patch.
    #[serde(default)]
    pub status_patch_as: Option<Impersonation>,
}

/// One item of `spec.steps`; exactly one field is set.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StageStep {
    /// Emit an event.
    #[serde(default)]
    pub event: Option<StageEvent>,
    /// Change finalizers.
    #[serde(default)]
    pub finalizers: Option<StageFinalizers>,
    /// Delete the object.
    #[serde(default)]
    pub delete: Option<bool>,
    /// Patch the object.
    #[serde(default)]
    pub patch: Option<StagePatch>,
    /// Apply a (possibly other) object.
    #[serde(default)]
    pub apply: Option<StageApply>,
}

/// An event to emit on the object.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StageEvent {
    /// `Normal` or `Warning`.
    #[serde(default, rename = "type")]
    pub type_: String,
    /// Machine-readable reason.
    #[serde(default)]
    pub reason: String,
    /// Human-readable message.
    #[serde(default)]
    pub message: String,
}

/// Finalizer changes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StageFinalizers {
    /// Finalizers to add.
    #[serde(default)]
    pub add: Vec<FinalizerItem>,
    /// Finalizers to remove.
    #[serde(default)]
    pub remove: Vec<FinalizerItem>,
    /// Remove every finalizer.
    #[serde(default)]
    pub empty: bool,
}

/// One finalizer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FinalizerItem {
    /// The finalizer name.
    pub value: String,
}

/// A patch step.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StagePatch {
    /// The subresource to patch (e.g. `status`); empty for the main resource.
    #[serde(default)]
    pub subresource: Option<String>,
    /// Wrap the rendered template under this top-level key.
    #[serde(default)]
    pub root: Option<String>,
    /// A Go template rendering YAML (or JSON).
    #[serde(default)]
    pub template: String,
    /// `json`, `merge` or `strategic`; default strategic for built-in kinds,
    /// merge for custom resources.
    #[serde(default, rename = "type")]
    pub type_: Option<String>,
    /// Send as this user.
    #[serde(default)]
    pub impersonation: Option<Impersonation>,
}

/// An apply step: renders a whole object.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StageApply {
    /// The subresource to write.
    #[serde(default)]
    pub subresource: Option<String>,
    /// A Go template rendering the object.
    #[serde(default)]
    pub template: String,
    /// `apply` (server-side apply, default), `merge` or `strategic`.
    #[serde(default, rename = "type")]
    pub type_: Option<String>,
    /// Send as this user.
    #[serde(default)]
    pub impersonation: Option<Impersonation>,
}

/// `impersonation` / `statusPatchAs`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Impersonation {
    /// The user to impersonate.
    pub username: String,
}
