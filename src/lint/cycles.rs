//! Cycles of Stages with no delay that play each other back to back: `ping` writes what
//! `pong` matches, `pong` writes what `ping` matches, and an object goes round for ever.
//!
//! Found by playing the Stages (those whose selectors read plain paths: nothing that would
//! need the evaluation sandbox runs here), not by reading them: from sample objects of each
//! resource (an empty one, and one per Stage with that Stage's writes on it), the Stage
//! with no delay that matches is played (its steps rendered and applied as the API server
//! would apply them), then the next, up to [`DEPTH`] plays. An object that comes back to a
//! state it was in, through two Stages or more, is a cycle. A write that changes nothing
//! ends the walk (no new version, so nothing matches again), and so does a step that
//! does not render on a sample or deletes the object: a cycle is reported only when it
//! is seen, never guessed.

use std::collections::BTreeSet;

use serde_json::Value;

use super::sample;
use crate::action::{self, Action, Typing};
use crate::patch::{self, PatchType};
use crate::stage::Stage;

/// Plays followed from one sample.
const DEPTH: usize = 16;

/// The cycles among `stages` (the Stages with no delay), each as the names of its
/// Stages in the order they play, starting from the one first in name order. Each cycle
/// once.
pub fn cycles(stages: &[&Stage]) -> Vec<Vec<String>> {
    let mut found: Vec<Vec<String>> = Vec::new();
    let mut resources: Vec<_> = stages.iter().map(|s| &s.resource).collect();
    resources.sort_by(|a, b| (&a.api_group, &a.kind).cmp(&(&b.api_group, &b.kind)));
    resources.dedup();
    for resource in resources {
        let mut group: Vec<&Stage> = stages
            .iter()
            .copied()
            .filter(|s| &s.resource == resource)
            .collect();
        group.sort_by(|a, b| a.name.cmp(&b.name));
        let empty = sample(group[0], 1);
        let seeds = std::iter::once(empty.clone())
            .chain(group.iter().filter_map(|s| play(s, &empty)))
            .collect::<Vec<_>>();
        for seed in seeds {
            if let Some(cycle) = walk(&group, seed)
                && !found.contains(&cycle)
            {
                found.push(cycle);
            }
        }
    }
    found
}

/// Play `group` from `object` until the object leaves every Stage, a write changes
/// nothing, or it comes back to a state it was in: then the cycle, when two Stages or
/// more take part.
fn walk(group: &[&Stage], mut object: Value) -> Option<Vec<String>> {
    let mut states = vec![state(&object)];
    let mut played: Vec<&str> = Vec::new();
    for _ in 0..DEPTH {
        let stage = group.iter().find(|s| s.selector.matches(&object))?;
        let next = play(stage, &object)?;
        let next_state = state(&next);
        if next_state == state(&object) {
            return None;
        }
        played.push(&stage.name);
        if let Some(at) = states.iter().position(|s| *s == next_state) {
            return named_cycle(&played[at..]);
        }
        states.push(next_state);
        object = next;
    }
    None
}

/// The cycle of `played` (the Stages played from a state back to it), rotated to start
/// at its first name in order; `None` when a single Stage plays it.
fn named_cycle(played: &[&str]) -> Option<Vec<String>> {
    let distinct: BTreeSet<&str> = played.iter().copied().collect();
    if distinct.len() < 2 {
        return None;
    }
    let first = played
        .iter()
        .enumerate()
        .min_by_key(|(_, name)| **name)
        .map_or(0, |(i, _)| i);
    let mut cycle: Vec<String> = played.iter().map(|s| (*s).to_owned()).collect();
    cycle.rotate_left(first);
    Some(cycle)
}

/// The object after `stage` played on it, as the API server would leave it (its
/// `resourceVersion` one higher); `None` when a step does not render here, fails to
/// apply, or deletes the object.
fn play(stage: &Stage, object: &Value) -> Option<Value> {
    let mut object = object.clone();
    for index in 0..stage.steps.len() {
        let actions = action::step_actions(
            stage,
            index,
            &object,
            Typing::Typed,
            &crate::decide::Builtin,
        )
        .ok()?;
        for action in actions {
            object = match action {
                Action::Delete => return None,
                Action::Event { .. } => continue,
                Action::Patch {
                    patch_type, data, ..
                } => patch::apply(&object, patch_type, &data, &stage.resource.kind).ok()?,
                Action::Apply {
                    object: applied, ..
                } => {
                    let same = crate::cluster::ObjectKey::of(&applied)
                        == crate::cluster::ObjectKey::of(&object);
                    if !same {
                        continue;
                    }
                    patch::apply(&object, PatchType::Apply, &applied, &stage.resource.kind).ok()?
                }
            };
        }
    }
    let version = crate::cluster::meta_str(&object, "resourceVersion")
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert(
            "resourceVersion".to_owned(),
            Value::String((version + 1).to_string()),
        );
    }
    Some(object)
}

/// The object without what the server changes on every write.
fn state(object: &Value) -> Value {
    let mut object = object.clone();
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("resourceVersion");
        meta.remove("generation");
        meta.remove("managedFields");
    }
    object
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::template::{GoldenEnv, Renderer};

    fn stages(yaml: &str) -> Vec<Stage> {
        let renderer = Renderer::new(Arc::new(GoldenEnv));
        let loaded = crate::stage::load::load_str(yaml, &renderer).expect("loads");
        assert!(loaded.problems.is_empty(), "{:?}", loaded.problems);
        loaded.stages
    }

    /// A Stage named `name` matching pods whose annotation `state` is `from` (or has
    /// none, for `from` empty), setting it to `to`.
    fn flip(name: &str, from: &str, to: &str) -> String {
        let selector = if from.is_empty() {
            "{key: '.metadata.annotations.state', operator: DoesNotExist}".to_owned()
        } else {
            format!("{{key: '.metadata.annotations.state', operator: In, values: ['{from}']}}")
        };
        format!(
            "apiVersion: kwok.x-k8s.io/v1alpha1\nkind: Stage\nmetadata: {{name: {name}}}\nspec:\n  resourceRef: {{apiGroup: v1, kind: Pod}}\n  selector:\n    matchExpressions: [{selector}]\n  next:\n    patches:\n    - type: merge\n      template: '{{\"metadata\":{{\"annotations\":{{\"state\":\"{to}\"}}}}}}'\n---\n"
        )
    }

    fn found(yaml: &str) -> Vec<Vec<String>> {
        let stages = stages(yaml);
        cycles(&stages.iter().collect::<Vec<_>>())
    }

    #[test]
    fn two_stages_that_undo_each_other_are_a_cycle() {
        let yaml = flip("ping", "pong", "ping") + &flip("pong", "ping", "pong");
        assert_eq!(found(&yaml), [["ping", "pong"]]);
    }

    #[test]
    fn three_stages_in_a_ring_are_a_cycle_from_an_empty_object_too() {
        let yaml =
            flip("a", "", "x") + &flip("b", "x", "y") + &flip("c", "y", "z") + &flip("d", "z", "x");
        assert_eq!(found(&yaml), [["b", "c", "d"]]);
    }

    #[test]
    fn a_chain_that_ends_is_not_a_cycle() {
        // pending -> running -> done, and nothing matches done.
        let yaml = flip("start", "", "running") + &flip("finish", "running", "done");
        assert_eq!(found(&yaml), Vec::<Vec<String>>::new());
        // A Stage whose write changes nothing the second time is no loop either.
        let yaml = flip("once", "", "set") + &flip("again", "set", "set");
        assert_eq!(found(&yaml), Vec::<Vec<String>>::new());
    }
}
