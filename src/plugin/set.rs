//! The configured plugins as one swappable set, and the engine's three deciders on top of
//! it.
//!
//! Each plugin is a named slot holding its current loaded version. A reload (file change,
//! SIGHUP) loads and validates the new version off to the side and swaps the slot's
//! `Arc` under a short write lock: calls in flight hold the old version and finish on it;
//! a version that fails validation is rejected, counted and logged, and the old one keeps
//! serving.
//!
//! Which plugin decides, per capability and Stage (first that applies):
//! 1. the Stage's annotation `kstage.dev/<capability>` (a plugin name, or `builtin`);
//! 2. the config's global `bindings.<capability>`;
//! 3. kstage's built-in behaviour.
//!
//! For selection, the candidates are the Stages whose own selectors matched; if they name
//! different selector plugins, the global binding decides (and a warning is logged).
//!
//! A plugin whose spec has a `rollout` with a canary share does not swap a new version in
//! at once: the new version is analysed beside the serving one (see [`super::rollout`])
//! and its slot serves both until the verdict. A version rolled back is not tried again
//! until its content changes.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::config::{FailurePolicy, PluginConfig, PluginSpec};
use super::error::{CallError, Cause, LoadError};
use super::host::HostEnv;
use super::loaded::{Plugin, last_run_time};
use super::rollout::{Canary, Outcome, Phase, Pick, Rollout, Tally, Verdict};
use super::runtime::{Runtime, digest};
use super::{Capability, types};
use crate::clock::Clock;
use crate::decide::{Builtin, Choice, RenderError, StageSelector, StepRenderer};
use crate::retry::{Classifier, Decision, Failure};
use crate::rng::Rng;
use crate::stage::{Stage, StageSet};
use crate::template::Template;

/// Counters of the set.
#[derive(Debug, Default)]
pub struct SetMetrics {
    /// New plugin versions swapped in.
    pub swaps: AtomicU64,
    /// New versions rejected (load or validation failed); the old one kept serving.
    pub rejections: AtomicU64,
    /// Failed calls answered by the built-in behaviour (policy `fallback`).
    pub fallbacks: AtomicU64,
    /// Failed calls that failed their decision (policy `fail`).
    pub failures: AtomicU64,
    /// New versions put under analysis (canary).
    pub canaries: AtomicU64,
    /// Analysed versions promoted.
    pub promoted: AtomicU64,
    /// Analysed versions rolled back.
    pub rolled_back: AtomicU64,
    /// Analysed versions replaced by another before a verdict.
    pub superseded: AtomicU64,
}

/// What a reload did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Reload {
    /// Plugins whose new version is now serving.
    pub swapped: Vec<String>,
    /// Plugins whose new version was rejected, with the reason.
    pub rejected: Vec<(String, String)>,
    /// Plugins whose new version is now analysed beside the serving one.
    pub canaries: Vec<String>,
    /// Analyses that ended, with their verdict.
    pub settled: Vec<(String, Verdict)>,
    /// Whether a swapped plugin selects Stages (objects should be matched again).
    pub selectors_changed: bool,
}

#[derive(Debug, Clone)]
struct Slot {
    spec: PluginSpec,
    plugin: Arc<Plugin>,
    /// A new version under analysis beside `plugin`.
    trial: Option<Trial>,
    /// The digest of the last version rolled back: not tried again until the content
    /// changes.
    refused: Option<String>,
}

impl Slot {
    fn new(spec: PluginSpec, plugin: Arc<Plugin>) -> Self {
        Self {
            spec,
            plugin,
            trial: None,
            refused: None,
        }
    }

    /// Whether `other` serves exactly as this slot does.
    fn same(&self, other: &Slot) -> bool {
        Arc::ptr_eq(&self.plugin, &other.plugin)
            && self.spec == other.spec
            && self.refused == other.refused
            && match (&self.trial, &other.trial) {
                (Some(a), Some(b)) => Arc::ptr_eq(&a.canary, &b.canary),
                (None, None) => true,
                _ => false,
            }
    }
}

/// A new version and its analysis.
#[derive(Debug, Clone)]
struct Trial {
    spec: PluginSpec,
    canary: Arc<Canary>,
}

/// A rollout in progress (or just decided), as [`PluginSet::rollouts`] reports it.
#[derive(Debug, Clone)]
pub struct RolloutReport {
    /// The plugin.
    pub plugin: String,
    /// The version serving before the rollout.
    pub stable: Arc<Plugin>,
    /// The version analysed.
    pub canary: Arc<Plugin>,
    /// Its policy.
    pub rollout: Rollout,
    /// When the analysis began.
    pub started: DateTime<Utc>,
    /// Where it stands.
    pub phase: Phase,
    /// The serving version's figures during the analysis.
    pub stable_figures: Tally,
    /// The new version's.
    pub canary_figures: Tally,
}

#[derive(Debug, Default, Clone)]
struct Snapshot {
    /// What serves: `file` and `resources` together.
    config: PluginConfig,
    /// The `--config` file's plugins and bindings.
    file: PluginConfig,
    /// The StagePlugin resources' (see `daemon::plugins`).
    resources: PluginConfig,
    slots: HashMap<String, Slot>,
}

/// The configured plugins.
pub struct PluginSet {
    runtime: Arc<Runtime>,
    clock: Arc<dyn Clock>,
    seed: Option<u64>,
    rngs: Mutex<HashMap<String, Arc<Mutex<Rng>>>>,
    current: RwLock<Arc<Snapshot>>,
    /// Serialises reloads.
    reloading: Mutex<()>,
    metrics: SetMetrics,
    /// Woken when an analysis reaches a verdict that waits to be recorded.
    proposals: Arc<tokio::sync::Notify>,
}

impl std::fmt::Debug for PluginSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginSet")
            .field("plugins", &self.snapshot().slots.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// The `--config` file's plugins and bindings with the resources': a name or a binding
/// both have is an error naming the resource's plugin.
fn combine(file: &PluginConfig, resources: &PluginConfig) -> Result<PluginConfig, Vec<LoadError>> {
    let mut config = file.clone();
    let mut errors = Vec::new();
    for spec in &resources.plugins {
        if file.plugins.iter().any(|p| p.name == spec.name) {
            errors.push(LoadError {
                plugin: spec.name.clone(),
                path: spec.path.clone(),
                problem: "the --config file has a plugin of this name too: define it one way only"
                    .to_owned(),
            });
        } else {
            config.plugins.push(spec.clone());
        }
    }
    for (capability, name) in &resources.bindings {
        match file.bindings.get(capability) {
            Some(other) => errors.push(LoadError {
                plugin: name.clone(),
                path: Default::default(),
                problem: format!("the --config file binds {capability} to {other:?} already"),
            }),
            None => {
                config.bindings.insert(*capability, name.clone());
            }
        }
    }
    if errors.is_empty() {
        Ok(config)
    } else {
        Err(errors)
    }
}

enum Bound {
    Builtin,
    Plugin(Route),
    Unknown(String),
}

/// The version(s) a call goes to: the serving one, and a new one under analysis.
struct Route {
    name: String,
    plugin: Arc<Plugin>,
    policy: FailurePolicy,
    /// The new version under analysis, and its failure policy.
    trial: Option<(Arc<Canary>, FailurePolicy)>,
}

impl Route {
    /// Call `call` on the version the analysis picks (or the serving one); with `same`
    /// (selector, classifier), the new version's answers are compared with the serving
    /// version's on the same input. The answer, and the failure policy of the version
    /// that gave it.
    fn call<T>(
        &self,
        set: &PluginSet,
        call: impl Fn(&Plugin) -> Result<T, CallError>,
        same: Option<fn(&T, &T) -> bool>,
    ) -> (Result<T, CallError>, FailurePolicy) {
        let Some((canary, canary_policy)) = &self.trial else {
            return (call(&self.plugin), self.policy);
        };
        let timed = |plugin: &Plugin, stable: bool| {
            let answer = call(plugin);
            canary.record(stable, last_run_time(), answer.is_err());
            answer
        };
        let compare = |new: &Result<T, CallError>, old: &Result<T, CallError>| {
            if let (Some(same), Ok(new), Ok(old)) = (same, new, old) {
                canary.compare(same(new, old));
            }
        };
        let answer = match canary.pick() {
            Pick::Stable => (timed(&self.plugin, true), self.policy),
            Pick::Canary => {
                let new = timed(&canary.plugin, false);
                if same.is_some() && canary.analysing() {
                    let old = timed(&self.plugin, true);
                    compare(&new, &old);
                }
                (new, *canary_policy)
            }
            Pick::Shadow => {
                let old = timed(&self.plugin, true);
                let new = timed(&canary.plugin, false);
                compare(&new, &old);
                (old, self.policy)
            }
        };
        if canary.analysing() {
            set.evaluate(&self.name, canary, set.clock.now());
        }
        answer
    }
}

impl PluginSet {
    /// Load every plugin of `config`; all must load and validate. `seed` makes the
    /// plugins' `random()` reproducible (`kstage sim`).
    pub fn load(
        runtime: Arc<Runtime>,
        config: PluginConfig,
        clock: Arc<dyn Clock>,
        seed: Option<u64>,
    ) -> Result<Arc<Self>, Vec<LoadError>> {
        let set = PluginSet {
            runtime,
            clock,
            seed,
            rngs: Mutex::new(HashMap::new()),
            current: RwLock::new(Arc::default()),
            reloading: Mutex::new(()),
            metrics: SetMetrics::default(),
            proposals: Arc::default(),
        };
        let (slots, _) =
            set.build_slots(&Snapshot::default(), &config, &PluginConfig::default())?;
        *set.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(Snapshot {
            file: config.clone(),
            config,
            resources: PluginConfig::default(),
            slots,
        });
        Ok(Arc::new(set))
    }

    /// The plugins serving now, by name.
    pub fn plugins(&self) -> Vec<Arc<Plugin>> {
        let snapshot = self.snapshot();
        let mut plugins: Vec<Arc<Plugin>> =
            snapshot.slots.values().map(|s| s.plugin.clone()).collect();
        plugins.sort_by(|a, b| a.name().cmp(b.name()));
        plugins
    }

    fn snapshot(&self) -> Arc<Snapshot> {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The counters.
    pub fn metrics(&self) -> &SetMetrics {
        &self.metrics
    }

    /// The serving version of plugin `name` (during an analysis: the version serving
    /// before it).
    pub fn plugin(&self, name: &str) -> Option<Arc<Plugin>> {
        self.snapshot().slots.get(name).map(|s| s.plugin.clone())
    }

    /// The rollouts in progress, and those decided but not yet settled.
    pub fn rollouts(&self) -> Vec<RolloutReport> {
        let snapshot = self.snapshot();
        let mut reports: Vec<RolloutReport> = snapshot
            .slots
            .iter()
            .filter_map(|(name, slot)| {
                let trial = slot.trial.as_ref()?;
                let (stable_figures, canary_figures) = trial.canary.tallies();
                Some(RolloutReport {
                    plugin: name.clone(),
                    stable: slot.plugin.clone(),
                    canary: trial.canary.plugin.clone(),
                    rollout: trial.canary.rollout,
                    started: trial.canary.started,
                    phase: trial.canary.phase(),
                    stable_figures,
                    canary_figures,
                })
            })
            .collect();
        reports.sort_by(|a, b| a.plugin.cmp(&b.plugin));
        reports
    }

    /// Decide the analyses whose time is up, and apply every verdict reached (the
    /// StagePlugins' only once [`PluginSet::settle`] is told): what a periodic task
    /// calls. The report lists the verdicts applied.
    pub fn settle_rollouts(&self) -> Reload {
        let now = self.clock.now();
        for (name, slot) in &self.snapshot().slots {
            if let Some(trial) = &slot.trial {
                self.evaluate(name, &trial.canary, now);
            }
        }
        self.fold(|_, _| None)
    }

    /// Apply `verdict` to plugin `name`'s analysis of the version with digest `canary`
    /// (a StagePlugin's, once its status records the verdict); whether there was one.
    pub fn settle(&self, name: &str, canary: &str, verdict: Verdict) -> bool {
        let report = self.fold(|slot_name, trial| {
            (slot_name == name && trial.canary.plugin.digest() == canary).then(|| verdict.clone())
        });
        report.settled.iter().any(|(n, _)| n == name)
    }

    /// Fold every settled analysis into its slot; `force` may settle one first.
    fn fold(&self, force: impl Fn(&str, &Trial) -> Option<Verdict>) -> Reload {
        let _guard = self
            .reloading
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let old = self.snapshot();
        let mut report = Reload::default();
        let mut slots = old.slots.clone();
        for (name, slot) in &mut slots {
            if let Some(trial) = &slot.trial
                && !matches!(trial.canary.phase(), Phase::Settled(_))
                && let Some(verdict) = force(name, trial)
            {
                self.count(&verdict);
                log_verdict(name, &trial.canary, &verdict);
                trial.canary.settle(verdict);
            }
            if let Some((folded, verdict)) = self.folded(slot) {
                if folded.plugin.has(Capability::Selector) || slot.plugin.has(Capability::Selector)
                {
                    report.selectors_changed = true;
                }
                if verdict.outcome == Outcome::Promoted {
                    report.swapped.push(name.clone());
                }
                report.settled.push((name.clone(), verdict));
                *slot = folded;
            }
        }
        if !report.settled.is_empty() {
            report.settled.sort_by(|a, b| a.0.cmp(&b.0));
            *self.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(Snapshot {
                slots,
                ..Snapshot::clone(&old)
            });
            self.forget_unused();
        }
        report
    }

    /// `slot` with its trial's verdict applied, if it has one settled.
    fn folded(&self, slot: &Slot) -> Option<(Slot, Verdict)> {
        let trial = slot.trial.as_ref()?;
        let Phase::Settled(verdict) = trial.canary.phase() else {
            return None;
        };
        let folded = match verdict.outcome {
            Outcome::Promoted => Slot::new(trial.spec.clone(), trial.canary.plugin.clone()),
            Outcome::RolledBack => Slot {
                trial: None,
                refused: Some(trial.canary.plugin.digest().to_owned()),
                ..slot.clone()
            },
            Outcome::Superseded => Slot {
                trial: None,
                ..slot.clone()
            },
        };
        Some((folded, verdict))
    }

    /// The plugin bound to `capability` for every Stage (by the file or a resource).
    pub fn bound_to(&self, capability: Capability) -> Option<String> {
        self.snapshot().config.bindings.get(&capability).cloned()
    }

    /// Whether the `--config` file has a plugin named `name`.
    pub fn file_has(&self, name: &str) -> bool {
        self.snapshot().file.plugins.iter().any(|p| p.name == name)
    }

    /// The plugin the `--config` file binds `capability` to, if any.
    pub fn file_binding(&self, capability: Capability) -> Option<String> {
        self.snapshot().file.bindings.get(&capability).cloned()
    }

    /// The folders holding the `--config` file's plugin files (what a watcher watches).
    pub fn folders(&self) -> Vec<std::path::PathBuf> {
        let mut folders: Vec<_> = self
            .snapshot()
            .file
            .plugins
            .iter()
            .map(|p| {
                p.path
                    .parent()
                    .filter(|f| !f.as_os_str().is_empty())
                    .unwrap_or(Path::new("."))
                    .to_owned()
            })
            .collect();
        folders.sort();
        folders.dedup();
        folders
    }

    fn rng(&self, name: &str) -> Arc<Mutex<Rng>> {
        let mut rngs = self.rngs.lock().unwrap_or_else(PoisonError::into_inner);
        rngs.entry(name.to_owned())
            .or_insert_with(|| {
                let rng = match self.seed {
                    // Each plugin its own stream, stable across versions of the plugin.
                    Some(seed) => Rng::seeded(seed ^ fnv1a(name.as_bytes())),
                    None => Rng::from_entropy(),
                };
                Arc::new(Mutex::new(rng))
            })
            .clone()
    }

    /// The random source picking which calls a new version of `name` takes: seeded
    /// like the plugins' own (a stream of its own), so a seeded run rolls out the same.
    fn canary_rng(&self, name: &str) -> Rng {
        match self.seed {
            Some(seed) => Rng::seeded(seed ^ fnv1a(name.as_bytes()) ^ fnv1a(b"canary")),
            None => Rng::from_entropy(),
        }
    }

    fn load_bytes(&self, spec: &PluginSpec, bytes: &[u8]) -> Result<Arc<Plugin>, LoadError> {
        let problem = |problem: String| LoadError {
            plugin: spec.name.clone(),
            path: spec.path.clone(),
            problem,
        };
        if let Some(pinned) = &spec.sha256 {
            let found = digest(bytes);
            if &found != pinned {
                return Err(problem(format!(
                    "sha256 is {found}, the config pins {pinned}"
                )));
            }
        }
        let env = HostEnv::new(&spec.name, self.clock.clone(), self.rng(&spec.name));
        let plugin = Plugin::load(
            &self.runtime,
            &spec.name,
            &spec.path,
            bytes,
            spec.settings.clone(),
            env,
        )?;
        plugin
            .validate()
            .map_err(|e| problem(format!("validation failed: {e}")))?;
        Ok(plugin)
    }

    /// Read every plugin file again and swap in the ones whose content changed (or put
    /// them under analysis, per their `rollout`).
    pub fn reload(&self) -> Reload {
        let snapshot = self.snapshot();
        let specs = snapshot.config.plugins.clone();
        self.apply(&specs, |spec| std::fs::read(&spec.path))
    }

    /// Take `bytes` as the new version of plugin `name` (what a file change does,
    /// without the file).
    pub fn replace(&self, name: &str, bytes: &[u8]) -> Reload {
        let snapshot = self.snapshot();
        let specs: Vec<PluginSpec> = snapshot
            .config
            .plugins
            .iter()
            .filter(|p| p.name == name)
            .cloned()
            .collect();
        self.apply(&specs, |_| Ok(bytes.to_vec()))
    }

    /// Take a new config (SIGHUP): plugins added are loaded, removed ones dropped,
    /// changed ones reloaded, bindings replaced. A new plugin that fails to load rejects
    /// the whole config; the old one stays.
    pub fn reconfigure(&self, file: PluginConfig) -> Result<Reload, Vec<LoadError>> {
        let _guard = self
            .reloading
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let resources = self.snapshot().resources.clone();
        self.install(file, resources)
    }

    /// Take the StagePlugin resources' plugins and bindings, beside the `--config`
    /// file's: as [`PluginSet::reconfigure`], all or nothing; a name or a binding the file
    /// has too is an error naming the plugin.
    pub fn reconfigure_resources(&self, resources: PluginConfig) -> Result<Reload, Vec<LoadError>> {
        let _guard = self
            .reloading
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let file = self.snapshot().file.clone();
        self.install(file, resources)
    }

    /// The `--config` file's plugins, as serving now.
    pub fn file_plugins(&self) -> Vec<PluginSpec> {
        self.snapshot().file.plugins.clone()
    }

    /// Take the `--config` file's plugin `name` from `path`, whose content has digest
    /// `sha256` (its registry tag moved): loaded and swapped in, or analysed per its
    /// `rollout`, as a changed file is. Nothing changes when it already has that digest.
    pub fn repoint(&self, name: &str, path: &Path, sha256: &str) -> Result<Reload, Vec<LoadError>> {
        let _guard = self
            .reloading
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let snapshot = self.snapshot();
        let mut file = snapshot.file.clone();
        let Some(spec) = file.plugins.iter_mut().find(|p| p.name == name) else {
            return Ok(Reload::default());
        };
        if spec.sha256.as_deref() == Some(sha256) {
            return Ok(Reload::default());
        }
        spec.path = path.to_owned();
        spec.sha256 = Some(sha256.to_owned());
        self.install(file, snapshot.resources.clone())
    }

    /// Serve `file` and `resources` together (the caller holds `reloading`).
    fn install(
        &self,
        file: PluginConfig,
        resources: PluginConfig,
    ) -> Result<Reload, Vec<LoadError>> {
        let old = self.snapshot();
        let reject = |errors: Vec<LoadError>| {
            self.metrics.rejections.fetch_add(1, Ordering::Relaxed);
            errors
        };
        let config = combine(&file, &resources).map_err(reject)?;
        let (slots, mut report) = self
            .build_slots(&old, &config, &resources)
            .map_err(reject)?;
        report.selectors_changed |= old.config.bindings.get(&Capability::Selector)
            != config.bindings.get(&Capability::Selector);
        self.metrics
            .swaps
            .fetch_add(report.swapped.len() as u64, Ordering::Relaxed);
        // Analyses of plugins no longer configured end with them.
        for (name, slot) in &old.slots {
            if !slots.contains_key(name)
                && let Some(trial) = &slot.trial
            {
                self.supersede(name, trial, "the plugin was removed");
            }
        }
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(Snapshot {
            config,
            file,
            resources,
            slots,
        });
        self.forget_unused();
        Ok(report)
    }

    /// The slots of `config`: each plugin's next slot from its `old` one (see
    /// [`PluginSet::next_slot`]). All or nothing.
    fn build_slots(
        &self,
        old: &Snapshot,
        config: &PluginConfig,
        resources: &PluginConfig,
    ) -> Result<(HashMap<String, Slot>, Reload), Vec<LoadError>> {
        let mut slots = HashMap::new();
        let mut errors = Vec::new();
        let mut report = Reload::default();
        for spec in &config.plugins {
            let coordinated = resources.plugins.iter().any(|p| p.name == spec.name);
            let next = std::fs::read(&spec.path)
                .map_err(|e| LoadError {
                    plugin: spec.name.clone(),
                    path: spec.path.clone(),
                    problem: format!("cannot read: {e}"),
                })
                .and_then(|bytes| {
                    self.next_slot(
                        old.slots.get(&spec.name),
                        spec,
                        &bytes,
                        coordinated,
                        &mut report,
                    )
                });
            match next {
                Ok(slot) => {
                    slots.insert(spec.name.clone(), slot);
                }
                Err(e) => errors.push(e),
            }
        }
        if errors.is_empty() {
            Ok((slots, report))
        } else {
            Err(errors)
        }
    }

    /// What a slot becomes when `spec` with content `bytes` is asked for:
    /// - nothing serves yet: the version is loaded and serves;
    /// - it is the version serving (same spec and content): kept, and an analysis of
    ///   another version ends (`Superseded`);
    /// - it is the version under analysis: the analysis goes on;
    /// - it is the version last rolled back, and the spec still asks for an analysis:
    ///   refused silently, the serving version stays (its content must change first);
    /// - else it is loaded and validated, then serves at once or, when the spec has a
    ///   canary share, is analysed beside the serving version (`coordinated`: its verdict
    ///   waits for [`PluginSet::settle`]).
    fn next_slot(
        &self,
        old: Option<&Slot>,
        spec: &PluginSpec,
        bytes: &[u8],
        coordinated: bool,
        report: &mut Reload,
    ) -> Result<Slot, LoadError> {
        let found = digest(bytes);
        let old = old.map(|slot| match self.folded(slot) {
            Some((folded, verdict)) => {
                report.settled.push((spec.name.clone(), verdict));
                folded
            }
            None => slot.clone(),
        });
        let Some(old) = old else {
            let plugin = self.load_bytes(spec, bytes)?;
            report.selectors_changed |= plugin.has(Capability::Selector);
            report.swapped.push(spec.name.clone());
            return Ok(Slot::new(spec.clone(), plugin));
        };
        if let Some(trial) = &old.trial
            && trial.spec == *spec
            && trial.canary.plugin.digest() == found
        {
            return Ok(old);
        }
        if old.spec == *spec && old.plugin.digest() == found {
            if let Some(trial) = &old.trial {
                self.supersede(&spec.name, trial, "the serving version was asked for again");
            }
            return Ok(Slot { trial: None, ..old });
        }
        if spec.rollout.analyses() && old.refused.as_deref() == Some(found.as_str()) {
            return Ok(old);
        }
        let plugin = self.load_bytes(spec, bytes)?;
        if let Some(trial) = &old.trial {
            self.supersede(&spec.name, trial, "a newer version replaced it");
        }
        if spec.rollout.analyses() {
            let canary = Canary::new(
                plugin.clone(),
                spec.rollout,
                self.clock.now(),
                self.canary_rng(&spec.name),
                coordinated,
            );
            tracing::info!(
                plugin = %spec.name,
                serving = %old.plugin.info().version,
                analysed = %plugin.info().version,
                sha256 = plugin.digest(),
                canary = spec.rollout.canary,
                mode = spec.rollout.mode.as_str(),
                "new plugin version under analysis"
            );
            self.metrics.canaries.fetch_add(1, Ordering::Relaxed);
            report.canaries.push(spec.name.clone());
            return Ok(Slot {
                trial: Some(Trial {
                    spec: spec.clone(),
                    canary: Arc::new(canary),
                }),
                refused: None,
                ..old
            });
        }
        tracing::info!(plugin = %spec.name, sha256 = plugin.digest(), version = %plugin.info().version, "plugin swapped");
        report.selectors_changed |= plugin.has(Capability::Selector);
        report.swapped.push(spec.name.clone());
        Ok(Slot::new(spec.clone(), plugin))
    }

    /// End `trial` without a verdict of its own.
    fn supersede(&self, name: &str, trial: &Trial, why: &str) {
        if matches!(trial.canary.phase(), Phase::Settled(_)) {
            return;
        }
        let verdict = Verdict {
            outcome: Outcome::Superseded,
            message: why.to_owned(),
        };
        self.count(&verdict);
        log_verdict(name, &trial.canary, &verdict);
        trial.canary.settle(verdict);
    }

    /// Check `canary`'s limits at `now` (after a call it answered, or periodically).
    fn evaluate(&self, name: &str, canary: &Canary, now: DateTime<Utc>) {
        if let Some(verdict) = canary.evaluate(now) {
            if canary.coordinated {
                tracing::info!(plugin = %name, outcome = verdict.outcome.as_str(), "plugin analysis reached a verdict, to be recorded: {}", verdict.message);
                self.proposals.notify_one();
            } else {
                log_verdict(name, canary, &verdict);
                self.count(&verdict);
            }
        }
    }

    /// Woken when an analysis of a StagePlugin's version reaches a verdict that waits
    /// for [`PluginSet::settle`].
    pub fn proposals(&self) -> Arc<tokio::sync::Notify> {
        self.proposals.clone()
    }

    fn count(&self, verdict: &Verdict) {
        let counter = match verdict.outcome {
            Outcome::Promoted => &self.metrics.promoted,
            Outcome::RolledBack => &self.metrics.rolled_back,
            Outcome::Superseded => &self.metrics.superseded,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Read new versions of `specs` (a file change, [`PluginSet::replace`]) and take
    /// them slot by slot; a version that fails is rejected, the others go ahead.
    fn apply(
        &self,
        specs: &[PluginSpec],
        read: impl Fn(&PluginSpec) -> std::io::Result<Vec<u8>>,
    ) -> Reload {
        let _guard = self
            .reloading
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut report = Reload::default();
        let serving = self.snapshot();
        let mut slots = serving.slots.clone();
        let mut changed = false;
        for spec in specs {
            let bytes = match read(spec) {
                Ok(bytes) => bytes,
                Err(e) => {
                    // Mid-replacement (a ConfigMap swap, an editor's rename): the next
                    // event brings the file; keep serving the old version.
                    tracing::debug!(plugin = %spec.name, error = %e, "plugin file unreadable; keeping the serving version");
                    continue;
                }
            };
            let coordinated = serving
                .resources
                .plugins
                .iter()
                .any(|p| p.name == spec.name);
            let old = serving.slots.get(&spec.name);
            match self.next_slot(old, spec, &bytes, coordinated, &mut report) {
                Ok(slot) => {
                    if !old.is_some_and(|old| old.same(&slot)) {
                        changed = true;
                        slots.insert(spec.name.clone(), slot);
                    }
                }
                Err(e) => {
                    tracing::error!(plugin = %spec.name, error = %e, "plugin version rejected; the serving version stays");
                    self.metrics.rejections.fetch_add(1, Ordering::Relaxed);
                    report.rejected.push((spec.name.clone(), e.to_string()));
                }
            }
        }
        if changed {
            *self.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(Snapshot {
                slots,
                ..Snapshot::clone(&serving)
            });
            self.metrics
                .swaps
                .fetch_add(report.swapped.len() as u64, Ordering::Relaxed);
            self.forget_unused();
        }
        report
    }

    fn forget_unused(&self) {
        let live: Vec<String> = self
            .snapshot()
            .slots
            .values()
            .flat_map(|s| {
                std::iter::once(s.plugin.digest().to_owned()).chain(
                    s.trial
                        .as_ref()
                        .map(|t| t.canary.plugin.digest().to_owned()),
                )
            })
            .collect();
        self.runtime.retain(&live);
    }

    fn bound(&self, capability: Capability, named: Option<&str>) -> Bound {
        let snapshot = self.snapshot();
        let name = named.or_else(|| {
            snapshot
                .config
                .bindings
                .get(&capability)
                .map(String::as_str)
        });
        match name {
            None | Some("builtin") => Bound::Builtin,
            Some(name) => match snapshot.slots.get(name) {
                Some(slot) => Bound::Plugin(Route {
                    name: name.to_owned(),
                    plugin: slot.plugin.clone(),
                    policy: slot.spec.policies.get(capability),
                    trial: slot
                        .trial
                        .as_ref()
                        .map(|t| (t.canary.clone(), t.spec.policies.get(capability))),
                }),
                None => Bound::Unknown(name.to_owned()),
            },
        }
    }

    /// A failed call under `policy`: `Some(())` means fall back to the built-in answer.
    fn failed(&self, error: &CallError, policy: FailurePolicy) -> bool {
        match policy {
            FailurePolicy::Fallback => {
                self.metrics.fallbacks.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(%error, "plugin failed; kstage's built-in behaviour decides");
                true
            }
            FailurePolicy::Fail => {
                self.metrics.failures.fetch_add(1, Ordering::Relaxed);
                tracing::error!(%error, "plugin failed");
                false
            }
        }
    }

    fn unknown(&self, name: String, capability: Capability) -> CallError {
        self.metrics.failures.fetch_add(1, Ordering::Relaxed);
        let error = CallError {
            plugin: name,
            export: capability.export(),
            cause: Cause::NotConfigured,
        };
        tracing::error!(%error, "a binding names an unknown plugin");
        error
    }
}

/// Log a rollout's verdict (a roll-back as a warning).
fn log_verdict(name: &str, canary: &Canary, verdict: &Verdict) {
    let version = &canary.plugin.info().version;
    let sha256 = canary.plugin.digest();
    let outcome = verdict.outcome.as_str();
    match verdict.outcome {
        Outcome::RolledBack => {
            tracing::warn!(plugin = %name, %version, sha256, outcome, "plugin version rolled back: {}", verdict.message);
        }
        _ => {
            tracing::info!(plugin = %name, %version, sha256, outcome, "plugin analysis ended: {}", verdict.message);
        }
    }
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The selector plugin the matched Stages name, if they agree.
fn named_selector<'a>(matched: &[&'a Arc<Stage>]) -> Option<&'a str> {
    let annotation = Capability::Selector.annotation();
    let mut names = matched
        .iter()
        .filter_map(|s| s.annotations.get(annotation).map(String::as_str));
    let first = names.next()?;
    if names.all(|n| n == first) {
        Some(first)
    } else {
        tracing::warn!(
            stages = ?matched.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
            "the matching Stages name different selector plugins; the global binding decides"
        );
        None
    }
}

impl StageSelector for PluginSet {
    fn select(
        &self,
        stages: &StageSet,
        object: &Value,
        rng: &mut Rng,
        now: DateTime<Utc>,
    ) -> Option<Choice> {
        let matched = stages.matching(object);
        if matched.is_empty() {
            return None;
        }
        let builtin = |matched, rng: &mut Rng| Builtin::choose(matched, object, rng, now);
        let route = match self.bound(Capability::Selector, named_selector(&matched)) {
            Bound::Builtin => return builtin(matched, rng),
            Bound::Unknown(name) => {
                self.unknown(name, Capability::Selector);
                return None;
            }
            Bound::Plugin(route) => route,
        };
        let delays: Vec<Option<Duration>> = matched
            .iter()
            .map(|s| {
                s.delay
                    .as_ref()
                    .map(|_| Builtin::delay(s, object, rng, now))
            })
            .collect();
        let candidates: Vec<types::Candidate> = matched
            .iter()
            .zip(&delays)
            .map(|(s, delay)| types::Candidate {
                name: s.name.clone(),
                weight: s.weight.get(object).unwrap_or(0),
                delay_ms: delay.map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX)),
            })
            .collect();
        let json = super::convert::object_json(object);
        let (selected, policy) = route.call(
            self,
            |plugin| plugin.select(&json, &candidates),
            Some(
                |a: &Option<types::Selection>, b: &Option<types::Selection>| {
                    a.as_ref().map(|s| &s.stage) == b.as_ref().map(|s| &s.stage)
                },
            ),
        );
        match selected {
            Ok(None) => None,
            Ok(Some(selection)) => {
                let index = matched.iter().position(|s| s.name == selection.stage)?;
                let delay = match selection.delay_ms {
                    Some(ms) => Duration::from_millis(u64::try_from(ms).unwrap_or(0)),
                    None => delays[index].unwrap_or(Duration::ZERO),
                };
                Some(Choice {
                    stage: matched[index].clone(),
                    delay,
                })
            }
            Err(error) => {
                if self.failed(&error, policy) {
                    builtin(matched, rng)
                } else {
                    None
                }
            }
        }
    }
}

impl StepRenderer for PluginSet {
    fn render(
        &self,
        stage: &Stage,
        template: &Template,
        object: &Value,
    ) -> Result<Value, RenderError> {
        let named = stage
            .annotations
            .get(Capability::Renderer.annotation())
            .map(String::as_str);
        let route = match self.bound(Capability::Renderer, named) {
            Bound::Builtin => return Builtin.render(stage, template, object),
            Bound::Unknown(name) => return Err(self.unknown(name, Capability::Renderer).into()),
            Bound::Plugin(route) => route,
        };
        let json = super::convert::object_json(object);
        let (rendered, policy) = route.call(
            self,
            |plugin| plugin.render(&stage.name, template.source(), &json),
            None,
        );
        match rendered {
            Ok(value) => Ok(value),
            Err(error) if self.failed(&error, policy) => Builtin.render(stage, template, object),
            Err(error) => Err(error.into()),
        }
    }
}

impl Classifier for PluginSet {
    fn classify(&self, failure: &Failure<'_>) -> Decision {
        let route = match self.bound(Capability::Classifier, failure.binding) {
            Bound::Builtin => return Builtin.classify(failure),
            Bound::Unknown(name) => {
                self.unknown(name, Capability::Classifier);
                return Decision::Backoff;
            }
            Bound::Plugin(route) => route,
        };
        let asked = super::convert::failure(failure);
        let (decided, policy) = route.call(
            self,
            |plugin| plugin.classify(&asked),
            Some(|a: &types::Decision, b: &types::Decision| a == b),
        );
        match decided {
            Ok(decision) => super::convert::decision(&decision),
            Err(error) if self.failed(&error, policy) => Builtin.classify(failure),
            // `fail`: the step is retried with the default backoff, so nothing is lost
            // while the plugin is broken (a fixed version is picked up on swap).
            Err(_) => Decision::Backoff,
        }
    }
}

impl PluginSet {
    /// The engine's deciders backed by this set.
    pub fn deciders(self: &Arc<Self>) -> crate::decide::Deciders {
        crate::decide::Deciders {
            selector: self.clone(),
            renderer: self.clone(),
            classifier: self.clone(),
        }
    }
}
