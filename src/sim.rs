//! `kstage sim`: the engine against the in-memory cluster, on a virtual clock.
//!
//! The objects are created at time zero, then the [`Engine`] plays Stages against a
//! [`MemoryCluster`] exactly as it would against an API server: watch events, the
//! weighted queue, workers, retries, and faults when asked. Time is tokio's paused clock,
//! so it jumps from one due job to the next: hours of lifecycle take milliseconds, and a
//! run (with one worker) is fully determined by its inputs and seed.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use crate::clock::Clock;
use crate::cluster::faults::{FaultSpec, Faults};
use crate::cluster::memory::MemoryCluster;
use crate::cluster::{ClusterError, ObjectKey};
use crate::decide::Deciders;
pub use crate::engine::journal::{Done, Entry, What};
use crate::engine::metrics::Metrics;
use crate::engine::{Engine, EngineConfig, Journal};
use crate::stage::StageSet;

/// How a simulation runs.
#[derive(Debug, Clone)]
pub struct Config {
    /// Seed of the random choices (weights, jitter, faults).
    pub seed: u64,
    /// Virtual wall time of the start.
    pub start: DateTime<Utc>,
    /// Stop at this virtual time.
    pub until: Duration,
    /// Delete every input object (as a user would, gracefully) at this virtual time.
    pub delete_after: Option<Duration>,
    /// Fail instead of running forever when Stages loop without advancing time.
    pub max_transitions: u64,
    /// Faults to inject into the cluster's answers.
    pub faults: FaultSpec,
    /// Engine workers; with one, a run is reproducible byte for byte.
    pub workers: usize,
    /// Record the timeline of Stages played (off when only the counters are wanted).
    pub timeline: bool,
    /// Who selects, renders and classifies (plugins with `--config`; built-in otherwise).
    pub deciders: Deciders,
    /// Told about every object that goes away (releases pod IPs).
    pub observer: Option<Arc<dyn crate::engine::Observer>>,
    /// How fast one object may play the same Stage again.
    pub loop_guard: crate::engine::LoopGuard,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            seed: 0,
            start: DateTime::<Utc>::UNIX_EPOCH,
            until: Duration::from_secs(24 * 3600),
            delete_after: None,
            max_transitions: 10_000_000,
            faults: FaultSpec::none(),
            workers: 1,
            timeline: true,
            deciders: Deciders::default(),
            observer: None,
            loop_guard: crate::engine::LoopGuard::default(),
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
        source: ClusterError,
    },
    /// `max_transitions` was reached.
    #[error(
        "stopped after {0} transitions: the Stages seem to loop; bound the run with --until or raise --max-transitions"
    )]
    TooManyTransitions(u64),
}

/// Counters of a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Stages played to their end.
    pub transitions: u64,
    /// Events emitted.
    pub events: u64,
    /// Writes that succeeded.
    pub writes: u64,
    /// Patches skipped because they changed nothing.
    pub noops: u64,
    /// Failed steps that were retried.
    pub retries: u64,
    /// Jobs dropped.
    pub errors: u64,
    /// Faults injected.
    pub faults: u64,
    /// Objects the loop guard slowed down for playing one Stage again and again.
    pub slowed: u64,
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
    pub end: Duration,
    /// Real time from the first object created until nothing was left to play (loading
    /// the Stages, collecting the final objects and freeing the store are outside it).
    pub wall: std::time::Duration,
}

/// Run a simulation. Call it inside a current-thread tokio runtime with paused time
/// (`kstage sim` makes one); `clock` must be a [`crate::clock::TokioClock`] started at
/// `config.start`, the clock the Stages' templates were compiled with.
///
/// Cancel safety: dropping the future mid-run leaves the engine's tasks running on the
/// runtime until it shuts down (they are aborted only at the end of a completed run); run
/// it to completion, and bound it with `config.until`.
pub async fn run(
    stages: StageSet,
    clock: Arc<dyn Clock>,
    objects: Vec<Value>,
    config: Config,
) -> Result<Report, SimError> {
    let journal = Arc::new(Journal::new());
    let cluster = Arc::new(MemoryCluster::new(
        clock.clone(),
        Faults::new(config.faults.clone(), config.seed),
    ));
    let wall_start = std::time::Instant::now();
    let mut created = Vec::with_capacity(objects.len());
    for (index, object) in objects.into_iter().enumerate() {
        let object = cluster
            .insert(object)
            .map_err(|source| SimError::Create { index, source })?;
        if let Some(key) = ObjectKey::of(&object) {
            journal.record(key.clone(), What::Created);
            created.push(key);
        }
    }
    let engine_config = EngineConfig {
        workers: config.workers,
        seed: config.seed,
        clock,
        journal: config.timeline.then(|| journal.clone()),
        observer: config.observer.clone(),
        loop_guard: config.loop_guard,
        ..EngineConfig::default()
    };
    let engine = Engine::with_deciders(
        cluster.clone(),
        stages,
        engine_config,
        config.deciders.clone(),
    );
    let tasks = engine.start();
    let origin = tokio::time::Instant::now();
    let until = origin + config.until;
    let mut delete_at = config.delete_after.map(|d| origin + d);
    loop {
        // Let every task run until the engine has handled every watch event.
        while engine.observed() < cluster.watch_events_sent() {
            tokio::task::yield_now().await;
        }
        tokio::task::yield_now().await;
        let transitions = engine.metrics().transitions_total();
        if transitions >= config.max_transitions {
            engine.shutdown();
            return Err(SimError::TooManyTransitions(transitions));
        }
        if delete_at.is_some_and(|at| at <= tokio::time::Instant::now()) {
            delete_at = None;
            for key in &created {
                user_delete(&cluster, &journal, key);
            }
            continue;
        }
        if engine.is_idle() && delete_at.is_none() {
            break;
        }
        let next = [engine.queue().next_due(), delete_at]
            .into_iter()
            .flatten()
            .min();
        match next {
            // Wake when the next job is due; the workers wake at the same instant.
            Some(t) if t <= until => tokio::time::sleep_until(t).await,
            _ => break,
        }
    }
    if tokio::time::Instant::now() < until && !engine.is_idle() {
        tokio::time::sleep_until(until).await;
    }
    let wall = wall_start.elapsed();
    engine.shutdown();
    for task in tasks {
        task.abort();
        // Wait for the task to go, so the engine's cache no longer shares the objects
        // and they can be taken out of the store without copying them.
        let _ = task.await;
    }
    let end = tokio::time::Instant::now()
        .saturating_duration_since(origin)
        .min(config.until);
    let m = engine.metrics();
    let stats = Stats {
        transitions: m.transitions_total(),
        events: Metrics::get(&m.events),
        writes: Metrics::get(&m.writes),
        noops: Metrics::get(&m.noops),
        retries: m
            .retries()
            .iter()
            .filter(|(k, _)| !k.starts_with("drop"))
            .map(|(_, v)| *v)
            .sum(),
        errors: m.dropped().values().sum(),
        faults: cluster.faults().injected_total(),
        slowed: Metrics::get(&m.slowed),
    };
    drop(engine);
    Ok(Report {
        timeline: journal.take(),
        objects: cluster
            .objects()
            .into_iter()
            .map(Arc::unwrap_or_clone)
            .collect(),
        stats,
        end,
        wall,
    })
}

fn user_delete(cluster: &MemoryCluster, journal: &Journal, key: &ObjectKey) {
    let before = cluster.object(key);
    if before.is_none() || cluster.user_delete(key).is_err() {
        return;
    }
    let after = cluster.object(key);
    let removed = after.is_none();
    if removed || after != before {
        journal.record(key.clone(), What::UserDelete { removed });
    }
}

/// `+00:01:02.345`: a fixed-width virtual time.
pub fn clock_time(at: Duration) -> String {
    let ms = at.as_millis();
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
                "retries": self.stats.retries,
                "errors": self.stats.errors,
                "faults": self.stats.faults,
                "slowed": self.stats.slowed,
                "end": clock_time(self.end),
            },
        })
    }
}
