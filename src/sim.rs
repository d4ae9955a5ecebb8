//! `kstage sim`: plays Stages against an in-memory store on a virtual clock.
//!
//! Objects are created at time zero; each write re-matches the objects it touched (as a
//! watch event would); a matched Stage is played when its delay is due. Time jumps from
//! one due job to the next, so hours of lifecycle take milliseconds, and a run is fully
//! determined by its inputs and seed.
//!
//! The job bookkeeping here is deliberately simple (one pending job per object, replaced
//! when the object changes); the daemon's weighted queue lives in `queue`.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap};
use std::fmt::Write as _;
use std::sync::Arc;

use chrono::{DateTime, TimeDelta, Utc};
use serde_json::{Value, json};

use crate::action::{self, Action, Typing};
use crate::clock::ManualClock;
use crate::cluster::memory::{Deleted, MemoryStore, Written};
use crate::cluster::{ApiError, ObjectKey};
use crate::rng::Rng;
use crate::stage::{Stage, StageSet, Step};

/// How a simulation runs.
#[derive(Debug, Clone)]
pub struct Config {
    /// Seed of the random source (weighted choice, jitter).
    pub seed: u64,
    /// Virtual time of the start.
    pub start: DateTime<Utc>,
    /// Stop when the next job is due later than this (virtual time from the start).
    pub until: Option<TimeDelta>,
    /// Delete every input object (as a user would, gracefully) at this virtual time.
    pub delete_after: Option<TimeDelta>,
    /// Fail instead of running forever when Stages loop without advancing time.
    pub max_transitions: u64,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            seed: 0,
            start: DateTime::<Utc>::UNIX_EPOCH,
            until: None,
            delete_after: None,
            max_transitions: 10_000_000,
        }
    }
}

/// A simulation that cannot go on.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// An input object could not be created.
    #[error("cannot create input object #{index}: {source}")]
    Create {
        /// Its position among the inputs.
        index: usize,
        /// Why.
        #[source]
        source: ApiError,
    },
    /// `max_transitions` was reached.
    #[error(
        "stopped after {0} transitions: the Stages seem to loop; bound the run with --until or raise --max-transitions"
    )]
    TooManyTransitions(u64),
}

/// What happened at one point of virtual time.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// Virtual time since the start.
    pub at: TimeDelta,
    /// The object.
    pub object: ObjectKey,
    /// What happened.
    pub what: What,
}

/// The kinds of timeline entries.
#[derive(Debug, Clone, PartialEq)]
pub enum What {
    /// The input object was created.
    Created,
    /// A user deleted the object (`--delete-after`).
    UserDelete {
        /// Whether it is gone (else it is terminating).
        removed: bool,
    },
    /// A Stage was played.
    Stage {
        /// Its name.
        name: String,
        /// What its steps did.
        actions: Vec<Done>,
        /// Why it stopped early, if it did.
        error: Option<String>,
    },
}

/// One action of a played Stage and its effect.
#[derive(Debug, Clone, PartialEq)]
pub struct Done {
    /// `event`, `patch`, `apply` or `delete`.
    pub kind: &'static str,
    /// A one-line description.
    pub detail: String,
    /// False when the write changed nothing (a no-op is not sent).
    pub changed: bool,
}

/// Counters of a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Stages played.
    pub transitions: u64,
    /// Events emitted.
    pub events: u64,
    /// Writes that changed an object.
    pub writes: u64,
    /// Patches skipped because they changed nothing.
    pub noops: u64,
    /// Stages that stopped on an error.
    pub errors: u64,
}

/// The result of a run.
#[derive(Debug)]
pub struct Report {
    /// Every entry, in time order.
    pub timeline: Vec<Entry>,
    /// The objects left, ordered by key.
    pub objects: Vec<Value>,
    /// Counters.
    pub stats: Stats,
    /// Virtual time at the end.
    pub end: TimeDelta,
}

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Due {
    at: DateTime<Utc>,
    seq: u64,
    task: Task,
}

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Task {
    Play(ObjectKey),
    UserDelete(ObjectKey),
}

/// A running simulation.
pub struct Simulation {
    stages: StageSet,
    store: MemoryStore,
    clock: Arc<ManualClock>,
    rng: Rng,
    config: Config,
    queue: BinaryHeap<Reverse<Due>>,
    /// The one pending job per object: its sequence number and Stage.
    jobs: HashMap<ObjectKey, (u64, Arc<Stage>)>,
    seq: u64,
    timeline: Vec<Entry>,
    stats: Stats,
}

impl Simulation {
    /// A simulation of `stages`; `clock` must be the clock the Stages' templates were
    /// compiled with, so `Now` is virtual time.
    pub fn new(stages: StageSet, clock: Arc<ManualClock>, config: Config) -> Self {
        clock.set(config.start);
        Self {
            stages,
            store: MemoryStore::new(clock.clone()),
            rng: Rng::seeded(config.seed),
            clock,
            config,
            queue: BinaryHeap::new(),
            jobs: HashMap::new(),
            seq: 0,
            timeline: Vec::new(),
            stats: Stats::default(),
        }
    }

    fn elapsed(&self) -> TimeDelta {
        self.clock.now() - self.config.start
    }

    fn push(&mut self, at: DateTime<Utc>, task: Task) -> u64 {
        self.seq += 1;
        self.queue.push(Reverse(Due {
            at,
            seq: self.seq,
            task,
        }));
        self.seq
    }

    /// Run with `objects` as the initial state.
    pub fn run(mut self, objects: Vec<Value>) -> Result<Report, SimError> {
        let mut created = Vec::with_capacity(objects.len());
        for (index, object) in objects.into_iter().enumerate() {
            let object = self
                .store
                .create(object)
                .map_err(|source| SimError::Create { index, source })?;
            if let Some(key) = ObjectKey::of(&object) {
                self.timeline.push(Entry {
                    at: TimeDelta::zero(),
                    object: key.clone(),
                    what: What::Created,
                });
                created.push(key);
            }
        }
        if let Some(after) = self.config.delete_after {
            let at = self.config.start + after;
            for key in &created {
                self.push(at, Task::UserDelete(key.clone()));
            }
        }
        for key in created {
            self.rematch(&key);
        }
        let until = self.config.until.map(|u| self.config.start + u);
        while let Some(Reverse(due)) = self.queue.pop() {
            if until.is_some_and(|u| due.at > u) {
                break;
            }
            self.clock.set(due.at.max(self.clock.now()));
            match due.task {
                Task::Play(key) => {
                    let current = self.jobs.get(&key).is_some_and(|(seq, _)| *seq == due.seq);
                    if !current {
                        continue; // replaced by a newer job for the same object
                    }
                    let Some((_, stage)) = self.jobs.remove(&key) else {
                        continue;
                    };
                    self.play(&key, &stage);
                    if self.stats.transitions >= self.config.max_transitions {
                        return Err(SimError::TooManyTransitions(self.stats.transitions));
                    }
                }
                Task::UserDelete(key) => self.user_delete(&key),
            }
        }
        if let Some(u) = until
            && u > self.clock.now()
        {
            self.clock.set(u);
        }
        Ok(Report {
            end: self.elapsed(),
            objects: self.store.into_objects().collect(),
            timeline: self.timeline,
            stats: self.stats,
        })
    }

    /// What a watch event does: pick the object's next Stage and schedule it, replacing
    /// any job the object had.
    fn rematch(&mut self, key: &ObjectKey) {
        let Some(object) = self.store.get(key) else {
            self.jobs.remove(key);
            return;
        };
        let now = self.clock.now();
        let Some(stage) = self.stages.select(object, &mut self.rng).cloned() else {
            self.jobs.remove(key);
            return;
        };
        let delay = stage
            .delay
            .as_ref()
            .and_then(|d| d.sample(object, now, &mut self.rng))
            .unwrap_or_default()
            .max(TimeDelta::zero());
        let seq = self.push(now + delay, Task::Play(key.clone()));
        self.jobs.insert(key.clone(), (seq, stage));
    }

    fn user_delete(&mut self, key: &ObjectKey) {
        let removed = match self.store.delete(key, None) {
            Ok(Deleted::Removed(_)) => true,
            Ok(Deleted::Terminating { changed, .. }) => {
                if !changed {
                    return;
                }
                false
            }
            Err(_) => return, // already gone
        };
        self.timeline.push(Entry {
            at: self.elapsed(),
            object: key.clone(),
            what: What::UserDelete { removed },
        });
        self.rematch(key);
    }

    /// Play `stage` on the object: each step renders against the object as the previous
    /// steps left it; after a delete only events are still sent.
    fn play(&mut self, key: &ObjectKey, stage: &Arc<Stage>) {
        self.stats.transitions += 1;
        let mut done = Vec::new();
        let mut error = None;
        let mut deleted = false;
        let mut touched = BTreeSet::new();
        let mut changed_self = false;
        'steps: for (index, step) in stage.steps.iter().enumerate() {
            if deleted && !matches!(step, Step::Event(_)) {
                continue;
            }
            let object = match self.store.get(key) {
                Some(object) => object,
                None if matches!(step, Step::Event(_)) => &Value::Null,
                None => break,
            };
            let actions = match action::step_actions(stage, index, object, Typing::Typed) {
                Ok(actions) => actions,
                Err(e) => {
                    error = Some(e.to_string());
                    break;
                }
            };
            for action in actions {
                match self.send(key, &action) {
                    Ok((target, changed)) => {
                        if changed {
                            self.stats.writes += u64::from(!matches!(action, Action::Event { .. }));
                            if target == *key {
                                changed_self = true;
                            } else {
                                touched.insert(target);
                            }
                        } else if !matches!(action, Action::Event { .. }) {
                            self.stats.noops += 1;
                        }
                        deleted |= matches!(action, Action::Delete);
                        done.push(Done {
                            kind: action.kind(),
                            detail: describe(&action),
                            changed,
                        });
                    }
                    Err(e) => {
                        error = Some(format!("step {index} ({}): {e}", action.kind()));
                        break 'steps;
                    }
                }
            }
        }
        if error.is_some() {
            self.stats.errors += 1;
        }
        self.timeline.push(Entry {
            at: self.elapsed(),
            object: key.clone(),
            what: What::Stage {
                name: stage.name.clone(),
                actions: done,
                error,
            },
        });
        if changed_self || stage.immediate_next_stage {
            self.rematch(key);
        }
        for other in touched {
            self.rematch(&other);
        }
    }

    /// Send one action; returns the object it wrote and whether anything changed.
    fn send(&mut self, key: &ObjectKey, action: &Action) -> Result<(ObjectKey, bool), ApiError> {
        match action {
            Action::Event { .. } => {
                self.stats.events += 1;
                Ok((key.clone(), false))
            }
            Action::Patch {
                patch_type,
                subresource,
                data,
                ..
            } => {
                let written = self
                    .store
                    .patch(key, *patch_type, subresource.as_deref(), data)?;
                Ok((key.clone(), changed(&written)))
            }
            Action::Apply {
                patch_type,
                subresource,
                object,
                ..
            } => {
                let target = ObjectKey::of(object).unwrap_or_else(|| key.clone());
                let written = self
                    .store
                    .apply(object, *patch_type, subresource.as_deref())?;
                let target = match &written {
                    Written::Stored { object, .. } => ObjectKey::of(object).unwrap_or(target),
                    Written::Removed(_) => target,
                };
                Ok((target, changed(&written)))
            }
            Action::Delete => match self.store.delete(key, Some(0))? {
                Deleted::Removed(_) => Ok((key.clone(), true)),
                Deleted::Terminating { changed, .. } => Ok((key.clone(), changed)),
            },
        }
    }
}

fn changed(written: &Written) -> bool {
    match written {
        Written::Stored { changed, .. } => *changed,
        Written::Removed(_) => true,
    }
}

fn describe(action: &Action) -> String {
    match action {
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
            let target = ObjectKey::of(object).map_or_else(|| "?".to_owned(), |k| k.to_string());
            match subresource {
                Some(sub) => format!("apply {target} {sub}"),
                None => format!("apply {target}"),
            }
        }
        Action::Delete => "delete".to_owned(),
    }
}

/// `+00:01:02.345`: a fixed-width virtual time.
pub fn clock_time(at: TimeDelta) -> String {
    let ms = at.num_milliseconds().max(0);
    format!(
        "+{:02}:{:02}:{:02}.{:03}",
        ms / 3_600_000,
        (ms / 60_000) % 60,
        (ms / 1000) % 60,
        ms % 1000
    )
}

impl Report {
    /// The timeline as text, one line per entry.
    pub fn timeline_text(&self) -> String {
        let mut s = String::new();
        for entry in &self.timeline {
            let _ = write!(s, "{}  {}  ", clock_time(entry.at), entry.object);
            match &entry.what {
                What::Created => s.push_str("created"),
                What::UserDelete { removed: true } => s.push_str("deleted by user: removed"),
                What::UserDelete { removed: false } => {
                    s.push_str("deleted by user: terminating");
                }
                What::Stage {
                    name,
                    actions,
                    error,
                } => {
                    let _ = write!(s, "stage {name}:");
                    if actions.is_empty() && error.is_none() {
                        s.push_str(" (nothing to send)");
                    }
                    for (i, done) in actions.iter().enumerate() {
                        s.push_str(if i == 0 { " " } else { ", " });
                        s.push_str(&done.detail);
                        if !done.changed && done.kind != "event" {
                            s.push_str(" [no-op]");
                        }
                    }
                    if let Some(e) = error {
                        let _ = write!(s, " FAILED: {e}");
                    }
                }
            }
            s.push('\n');
        }
        s
    }

    /// The whole report as data (for `--output yaml|json`).
    pub fn to_value(&self) -> Value {
        let timeline: Vec<Value> = self
            .timeline
            .iter()
            .map(|e| {
                let mut v = json!({
                    "at": clock_time(e.at),
                    "object": e.object.to_string(),
                });
                let fields = match &e.what {
                    What::Created => json!({"event": "created"}),
                    What::UserDelete { removed } => {
                        json!({"event": "user-delete", "removed": removed})
                    }
                    What::Stage {
                        name,
                        actions,
                        error,
                    } => {
                        let actions: Vec<Value> = actions
                            .iter()
                            .map(|d| json!({"action": d.detail, "changed": d.changed}))
                            .collect();
                        let mut v = json!({"event": "stage", "stage": name, "actions": actions});
                        if let Some(e) = error {
                            v["error"] = json!(e);
                        }
                        v
                    }
                };
                if let (Some(v), Some(f)) = (v.as_object_mut(), fields.as_object()) {
                    v.extend(f.clone());
                }
                v
            })
            .collect();
        json!({
            "timeline": timeline,
            "objects": self.objects,
            "stats": {
                "transitions": self.stats.transitions,
                "events": self.stats.events,
                "writes": self.stats.writes,
                "noops": self.stats.noops,
                "errors": self.stats.errors,
                "end": clock_time(self.end),
            },
        })
    }
}
