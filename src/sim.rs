//! `kstage sim`: the engine against the in-memory cluster, on a virtual clock.
//!
//! The objects are created at time zero, then the [`Engine`] plays Stages against a
//! [`MemoryCluster`] exactly as it would against an API server: watch events, the
//! weighted queue, workers, retries, and faults when asked. Time is tokio's paused clock,
//! so it jumps from one due job to the next: hours of lifecycle take milliseconds, and a
//! run (with one worker) is fully determined by its inputs and seed.
//!
//! With plugins, new versions can be swapped in at given virtual times ([`Swap`]): under
//! their `rollout` they are analysed on the calls the run makes (which calls go to the
//! new version is drawn from the seed) and promoted or rolled back, and the report lists
//! what happened to each plugin when ([`PluginEvent`]). Verdicts on error rates and
//! disagreements are reproducible; one on `maxLatencyRatio` is not (latencies are real
//! time).

use std::collections::{BTreeMap, VecDeque};
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
use crate::plugin::PluginSet;
use crate::plugin::rollout::{Outcome, Phase};
use crate::plugin::set::Reload;
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
    /// The plugin set behind `deciders`, when there is one (for `swaps`).
    pub plugins: Option<Arc<PluginSet>>,
    /// New plugin versions to take during the run, in any order.
    pub swaps: Vec<Swap>,
}

/// A new version of a plugin, taken at a virtual time (`kstage sim --swap`).
#[derive(Debug, Clone)]
pub struct Swap {
    /// When, from the start.
    pub at: Duration,
    /// The plugin (a name of the config).
    pub plugin: String,
    /// The new component.
    pub bytes: Arc<Vec<u8>>,
}

/// What happened to a plugin during a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginEvent {
    /// Virtual time from the start.
    pub at: Duration,
    /// The plugin.
    pub plugin: String,
    /// `swapped`, `analysing`, `rejected`, `unchanged`, `promoted`, `rolled-back`,
    /// `superseded`.
    pub event: &'static str,
    /// The detail: the version, the verdict's reason and figures.
    pub detail: String,
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
            plugins: None,
            swaps: Vec::new(),
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
    /// Stages kept playing at one virtual instant past the bound.
    #[error(
        "stopped at virtual time {}: {plays} Stages were played at that one instant and time did not move on (most played: {}); Stages with no delay are playing each other in a loop: give one of them a delay, or leave the loop guard on (--loop-guard)",
        clock_time(*at),
        most_played(stages)
    )]
    Spinning {
        /// Virtual time from the start.
        at: Duration,
        /// Stages played at that instant.
        plays: u64,
        /// The Stages played at that instant (in its second half), most played first.
        stages: Vec<(String, u64)>,
    },
}

/// `name ×N` for the first few of `stages`.
fn most_played(stages: &[(String, u64)]) -> String {
    let mut shown: Vec<String> = stages
        .iter()
        .take(5)
        .map(|(name, n)| format!("{name} x{n}"))
        .collect();
    if stages.len() > 5 {
        shown.push("...".to_owned());
    }
    shown.join(", ")
}

/// Watches that virtual time moves on: past `bound` Stages played at one virtual instant
/// the run ends with [`SimError::Spinning`] (a loop of Stages with no delay, with the loop
/// guard off or too loose), instead of filling memory with its timeline.
struct Spin {
    /// The instant being watched (`None`: none yet), and the plays when it began.
    at: Option<tokio::time::Instant>,
    base_total: u64,
    /// The plays per Stage once half the bound was played at this instant (taken only
    /// then: a map per instant would cost every run), to name what loops.
    halfway: Option<BTreeMap<String, u64>>,
    /// Plays allowed at one instant, per object in the cluster.
    per_object: u64,
    /// Polls since the last check.
    polls: u32,
}

impl Spin {
    /// Checks are made every this many polls of the engine (a check reads every Stage's
    /// counter).
    const EVERY: u32 = 1024;
    /// Plays allowed at one instant whatever the number of objects.
    const FLOOR: u64 = 10_000;

    fn new(guard: &crate::engine::LoopGuard) -> Self {
        // The guard lets one object play `burst + 1` Stages back to back before it waits;
        // an object of an ordinary lifecycle plays a few. Twice the guard's allowance per
        // object (at least 100) leaves room for both.
        let allowed = if guard.burst == u32::MAX {
            100
        } else {
            (2 * (u64::from(guard.burst) + 1)).max(100)
        };
        Self {
            at: None,
            base_total: 0,
            halfway: None,
            per_object: allowed,
            polls: 0,
        }
    }

    /// Called on every poll; checks now and then.
    fn poll(
        &mut self,
        engine: &Engine<MemoryCluster>,
        cluster: &MemoryCluster,
        origin: tokio::time::Instant,
    ) -> Result<(), SimError> {
        self.polls += 1;
        if self.polls < Self::EVERY {
            return Ok(());
        }
        self.check(engine, cluster, origin)
    }

    fn check(
        &mut self,
        engine: &Engine<MemoryCluster>,
        cluster: &MemoryCluster,
        origin: tokio::time::Instant,
    ) -> Result<(), SimError> {
        self.polls = 0;
        let now = tokio::time::Instant::now();
        let metrics = engine.metrics();
        if self.at != Some(now) {
            self.at = Some(now);
            self.base_total = metrics.transitions_total();
            self.halfway = None;
            return Ok(());
        }
        let plays = metrics.transitions_total().saturating_sub(self.base_total);
        let bound = Self::FLOOR.max(self.per_object.saturating_mul(cluster.len() as u64));
        if plays <= bound {
            if plays > bound / 2 && self.halfway.is_none() {
                self.halfway = Some(metrics.transitions());
            }
            return Ok(());
        }
        let halfway = self.halfway.take().unwrap_or_default();
        let mut stages: Vec<(String, u64)> = metrics
            .transitions()
            .into_iter()
            .map(|(name, n)| {
                let before = halfway.get(&name).copied().unwrap_or(0);
                (name, n.saturating_sub(before))
            })
            .filter(|(_, n)| *n > 0)
            .collect();
        stages.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        Err(SimError::Spinning {
            at: now.saturating_duration_since(origin),
            plays,
            stages,
        })
    }
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
    /// What happened to the plugins (swaps and rollouts), in time order.
    pub plugins: Vec<PluginEvent>,
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
    let plugin_clock = clock.clone();
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
    let mut plugins = Plugins::new(config.plugins.clone(), plugin_clock, &config.swaps, origin);
    let mut spin = Spin::new(&config.loop_guard);
    loop {
        // Let every task run until the engine has handled every watch event (which a
        // loop of Stages at one instant never lets happen: `spin` ends that).
        while engine.observed() < cluster.watch_events_sent() {
            tokio::task::yield_now().await;
            if let Err(e) = spin.poll(&engine, &cluster, origin) {
                engine.shutdown();
                return Err(e);
            }
        }
        tokio::task::yield_now().await;
        if let Err(e) = spin.check(&engine, &cluster, origin) {
            engine.shutdown();
            return Err(e);
        }
        let transitions = engine.metrics().transitions_total();
        if transitions >= config.max_transitions {
            engine.shutdown();
            return Err(SimError::TooManyTransitions(transitions));
        }
        if plugins.step(&engine) {
            continue;
        }
        if delete_at.is_some_and(|at| at <= tokio::time::Instant::now()) {
            delete_at = None;
            for key in &created {
                user_delete(&cluster, &journal, key);
            }
            continue;
        }
        let plugins_due = plugins.next_due(until);
        if engine.is_idle() && delete_at.is_none() && plugins_due.is_none() {
            break;
        }
        let next = [engine.queue().next_due(), delete_at, plugins_due]
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
    plugins.settle();
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
        plugins: plugins.events,
    })
}

/// The plugin swaps of a run and what came of them.
struct Plugins {
    set: Option<Arc<PluginSet>>,
    /// The set's clock (virtual).
    clock: Arc<dyn Clock>,
    swaps: VecDeque<Swap>,
    origin: tokio::time::Instant,
    events: Vec<PluginEvent>,
}

impl Plugins {
    fn new(
        set: Option<Arc<PluginSet>>,
        clock: Arc<dyn Clock>,
        swaps: &[Swap],
        origin: tokio::time::Instant,
    ) -> Self {
        let mut swaps = swaps.to_vec();
        swaps.sort_by_key(|s| s.at);
        Self {
            set,
            clock,
            swaps: swaps.into(),
            origin,
            events: Vec::new(),
        }
    }

    fn now(&self) -> Duration {
        tokio::time::Instant::now().saturating_duration_since(self.origin)
    }

    /// Record the verdicts reached, then take the next swap if it is due; whether one was
    /// taken (the engine may have work again).
    fn step(&mut self, engine: &Arc<Engine<MemoryCluster>>) -> bool {
        self.settle();
        let (Some(set), Some(swap)) = (self.set.clone(), self.swaps.front()) else {
            return false;
        };
        if swap.at > self.now() {
            return false;
        }
        let swap = self.swaps.pop_front().expect("a swap");
        let report = set.replace(&swap.plugin, &swap.bytes);
        self.record(&set, &swap.plugin, &report);
        if report.selectors_changed {
            let _ = engine.set_stages((*engine.stages()).clone());
        }
        true
    }

    /// Fold the verdicts reached (and decide the analyses whose time is up).
    fn settle(&mut self) {
        let Some(set) = self.set.clone() else { return };
        if set.rollouts().is_empty() {
            return;
        }
        let report = set.settle_rollouts();
        for (plugin, verdict) in report.settled {
            self.push(
                &plugin,
                match verdict.outcome {
                    Outcome::Promoted => "promoted",
                    Outcome::RolledBack => "rolled-back",
                    Outcome::Superseded => "superseded",
                },
                verdict.message,
            );
        }
    }

    fn record(&mut self, set: &PluginSet, name: &str, report: &Reload) {
        let version = || {
            set.plugin(name)
                .map(|p| format!("version {} (sha256 {})", p.info().version, p.digest()))
                .unwrap_or_default()
        };
        if report.swapped.iter().any(|n| n == name) {
            self.push(name, "swapped", version());
        } else if let Some((_, why)) = report.rejected.iter().find(|(n, _)| n == name) {
            self.push(
                name,
                "rejected",
                format!("{why}; {} keeps serving", version()),
            );
        } else if let Some(r) = set.rollouts().into_iter().find(|r| r.plugin == name) {
            let a = r.rollout.analysis;
            self.push(
                name,
                "analysing",
                format!(
                    "version {} (sha256 {}) takes {}% of the calls ({}) for at least {:?} and {} calls; version {} serves the rest",
                    r.canary.info().version,
                    r.canary.digest(),
                    r.rollout.canary,
                    r.rollout.mode.as_str(),
                    a.duration,
                    a.min_calls,
                    r.stable.info().version,
                ),
            );
        } else {
            self.push(
                name,
                "unchanged",
                format!("the same content; {}", version()),
            );
        }
    }

    fn push(&mut self, plugin: &str, event: &'static str, detail: String) {
        self.events.push(PluginEvent {
            at: self.now(),
            plugin: plugin.to_owned(),
            event,
            detail,
        });
    }

    /// When the loop must wake next for the plugins (a swap, an analysis whose time is up),
    /// if before `until`.
    fn next_due(&self, until: tokio::time::Instant) -> Option<tokio::time::Instant> {
        let set = self.set.as_ref()?;
        let swap = self.swaps.front().map(|s| self.origin + s.at);
        let now = self.clock.now();
        // Past its time, an analysis waiting for calls is decided by them.
        let analyses = set.rollouts().into_iter().filter_map(|r| {
            if r.phase != Phase::Analysing {
                return None;
            }
            let end = r.started + chrono::TimeDelta::from_std(r.rollout.analysis.duration).ok()?;
            let left = (end - now).to_std().ok().filter(|d| !d.is_zero())?;
            Some(tokio::time::Instant::now() + left)
        });
        swap.into_iter()
            .chain(analyses)
            .filter(|t| *t <= until)
            .min()
    }
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

    /// What happened to the plugins, one line per event.
    pub fn plugins_text(&self) -> String {
        let mut s = String::new();
        for e in &self.plugins {
            let _ = writeln!(
                s,
                "{}  {}  {}: {}",
                clock_time(e.at),
                e.plugin,
                e.event,
                e.detail
            );
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
        let mut value = json!({
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
        });
        if !self.plugins.is_empty() {
            value["plugins"] = self
                .plugins
                .iter()
                .map(|e| {
                    json!({"at": clock_time(e.at), "plugin": e.plugin, "event": e.event, "detail": e.detail})
                })
                .collect();
        }
        value
    }
}
