//! The three decisions kstage delegates, as traits the engine calls without knowing who
//! answers: [`StageSelector`] (which Stage an object plays next), [`StepRenderer`] (what
//! a step's template renders to) and [`Classifier`] (what a failed step does next). Each
//! has the built-in, KWOK-compatible answer here ([`Builtin`]); a
//! [`PluginSet`](crate::plugin::PluginSet) answers them with WebAssembly plugins,
//! falling back to these.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;

pub use crate::retry::{BuiltinClassifier, Classifier};
use crate::rng::Rng;
use crate::stage::{Stage, StageSet};
use crate::template::{Template, TemplateError};

/// The Stage an object plays next, and when.
#[derive(Debug, Clone)]
pub struct Choice {
    /// The Stage.
    pub stage: Arc<Stage>,
    /// How long to wait before playing it.
    pub delay: Duration,
}

/// Chooses the next Stage of an object.
pub trait StageSelector: Send + Sync {
    /// The next Stage for `object` among `stages` (`None`: nothing to play now).
    fn select(
        &self,
        stages: &StageSet,
        object: &Value,
        rng: &mut Rng,
        now: DateTime<Utc>,
    ) -> Option<Choice>;
}

/// Why a template could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// A Go template failed, or its output is not YAML/JSON.
    #[error(transparent)]
    Template(#[from] TemplateError),
    /// The renderer the Stage is bound to (a plugin, `plugin::CallError`) failed and its
    /// failure policy is `fail`.
    #[error(transparent)]
    Plugin(Box<dyn std::error::Error + Send + Sync>),
}

/// Renders a step's template for an object.
pub trait StepRenderer: Send + Sync {
    /// `template` (a step of `stage`) rendered for `object`, as JSON.
    fn render(
        &self,
        stage: &Stage,
        template: &Template,
        object: &Value,
    ) -> Result<Value, RenderError>;
}

/// KWOK's answers: weighted random choice among the matching Stages with their sampled
/// delay, Go templates, and the built-in failure classification.
#[derive(Debug, Clone, Copy, Default)]
pub struct Builtin;

impl Builtin {
    /// The delay of `stage` for `object`, sampled (zero when it has none).
    pub fn delay(stage: &Stage, object: &Value, rng: &mut Rng, now: DateTime<Utc>) -> Duration {
        let Some(delay) = &stage.delay else {
            return Duration::ZERO;
        };
        let Some(sampled) = delay.sample(object, now, rng) else {
            delay.unusable(&stage.name, object);
            return Duration::ZERO;
        };
        sampled.to_std().unwrap_or(Duration::ZERO)
    }
}

impl Builtin {
    /// KWOK's weighted choice among `matched` (the Stages whose selectors matched), with
    /// the chosen Stage's sampled delay.
    pub fn choose(
        matched: Vec<&Arc<Stage>>,
        object: &Value,
        rng: &mut Rng,
        now: DateTime<Utc>,
    ) -> Option<Choice> {
        let stage = StageSet::choose(matched, object, rng)?.clone();
        let delay = Builtin::delay(&stage, object, rng, now);
        Some(Choice { stage, delay })
    }
}

impl StageSelector for Builtin {
    fn select(
        &self,
        stages: &StageSet,
        object: &Value,
        rng: &mut Rng,
        now: DateTime<Utc>,
    ) -> Option<Choice> {
        Builtin::choose(stages.matching(object), object, rng, now)
    }
}

impl StepRenderer for Builtin {
    fn render(
        &self,
        _stage: &Stage,
        template: &Template,
        object: &Value,
    ) -> Result<Value, RenderError> {
        Ok(template.render_json(object)?)
    }
}

impl Classifier for Builtin {
    fn classify(&self, failure: &crate::retry::Failure<'_>) -> crate::retry::Decision {
        BuiltinClassifier.classify(failure)
    }
}

/// The three deciders an engine uses.
#[derive(Clone)]
pub struct Deciders {
    /// Stage selection.
    pub selector: Arc<dyn StageSelector>,
    /// Template rendering.
    pub renderer: Arc<dyn StepRenderer>,
    /// Failure classification.
    pub classifier: Arc<dyn Classifier>,
}

impl std::fmt::Debug for Deciders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deciders").finish_non_exhaustive()
    }
}

impl Default for Deciders {
    fn default() -> Self {
        Self {
            selector: Arc::new(Builtin),
            renderer: Arc::new(Builtin),
            classifier: Arc::new(Builtin),
        }
    }
}
