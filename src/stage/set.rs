//! A set of compiled Stages, indexed by the resource they apply to.

use std::sync::Arc;

use serde_json::Value;

use super::value::{choose_weighted, possible};
use super::{ResourceRef, Stage};
use crate::rng::Rng;

/// The Stages the engine plays, grouped by `resourceRef` for fast matching.
#[derive(Debug, Default, Clone)]
pub struct StageSet {
    stages: Vec<Arc<Stage>>,
    /// Per resource, the indices of its Stages in load order. Few resources, so a
    /// linear scan on borrowed strings beats hashing an owned key per lookup.
    by_resource: Vec<(ResourceRef, Vec<usize>)>,
}

impl StageSet {
    /// Index `stages`, keeping their order.
    pub fn new(stages: impl IntoIterator<Item = Stage>) -> Self {
        Self::from_shared(stages.into_iter().map(Arc::new))
    }

    /// Index shared `stages` (from several sources), keeping their order.
    pub fn from_shared(stages: impl IntoIterator<Item = Arc<Stage>>) -> Self {
        let stages: Vec<Arc<Stage>> = stages.into_iter().collect();
        let mut by_resource: Vec<(ResourceRef, Vec<usize>)> = Vec::new();
        for (i, stage) in stages.iter().enumerate() {
            match by_resource.iter_mut().find(|(r, _)| *r == stage.resource) {
                Some((_, list)) => list.push(i),
                None => by_resource.push((stage.resource.clone(), vec![i])),
            }
        }
        Self {
            stages,
            by_resource,
        }
    }

    /// All Stages, in load order.
    pub fn stages(&self) -> &[Arc<Stage>] {
        &self.stages
    }

    /// Whether there are no Stages.
    pub fn is_empty(&self) -> bool {
        self.stages.is_empty()
    }

    /// The resources that have at least one Stage.
    pub fn resources(&self) -> impl Iterator<Item = &ResourceRef> {
        self.by_resource.iter().map(|(r, _)| r)
    }

    /// The Stages of the resource an object belongs to (by `apiVersion` and `kind`).
    pub fn for_object<'a>(&'a self, object: &Value) -> impl Iterator<Item = &'a Arc<Stage>> {
        let api = object
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or("");
        let kind = object.get("kind").and_then(Value::as_str).unwrap_or("");
        self.by_resource
            .iter()
            .find(|(r, _)| r.api_group == api && r.kind == kind)
            .map(|(_, list)| list.as_slice())
            .unwrap_or_default()
            .iter()
            .map(|i| &self.stages[*i])
    }

    /// Every Stage whose selector matches the object.
    pub fn matching(&self, object: &Value) -> Vec<&Arc<Stage>> {
        self.for_object(object)
            .filter(|s| s.selector.matches(object))
            .collect()
    }

    /// KWOK's choice of the next Stage: among the matching Stages, one is picked at
    /// random by weight (a single match is taken whatever its weight).
    pub fn select(&self, object: &Value, rng: &mut Rng) -> Option<&Arc<Stage>> {
        Self::choose(self.matching(object), object, rng)
    }

    /// KWOK's weighted choice among `matched` (the Stages [`StageSet::matching`] gave).
    pub fn choose<'a>(
        matched: Vec<&'a Arc<Stage>>,
        object: &Value,
        rng: &mut Rng,
    ) -> Option<&'a Arc<Stage>> {
        if matched.len() <= 1 {
            return matched.into_iter().next();
        }
        let weights: Vec<Option<i64>> = matched.iter().map(|s| s.weight.get(object)).collect();
        if weights.iter().any(Option::is_some) {
            for (stage, _) in matched.iter().zip(&weights).filter(|(_, w)| w.is_none()) {
                stage.weight.unusable(&stage.name, object);
            }
        }
        choose_weighted(&weights, rng).map(|i| matched[i])
    }

    /// Every Stage that [`StageSet::select`] could pick (KWOK's `ListAllPossible`).
    pub fn possible(&self, object: &Value) -> Vec<&Arc<Stage>> {
        let matched = self.matching(object);
        if matched.len() <= 1 {
            return matched;
        }
        let weights: Vec<Option<i64>> = matched.iter().map(|s| s.weight.get(object)).collect();
        possible(&weights).into_iter().map(|i| matched[i]).collect()
    }
}
