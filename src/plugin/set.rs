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
use super::loaded::Plugin;
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
}

/// What a reload did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Reload {
    /// Plugins whose new version is now serving.
    pub swapped: Vec<String>,
    /// Plugins whose new version was rejected, with the reason.
    pub rejected: Vec<(String, String)>,
    /// Whether a swapped plugin selects Stages (objects should be matched again).
    pub selectors_changed: bool,
}

#[derive(Debug, Clone)]
struct Slot {
    spec: PluginSpec,
    plugin: Arc<Plugin>,
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
    Plugin(Arc<Plugin>, FailurePolicy),
    Unknown(String),
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
        };
        let (slots, _) = set.build_slots(&Snapshot::default(), &config)?;
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

    /// The serving version of plugin `name`.
    pub fn plugin(&self, name: &str) -> Option<Arc<Plugin>> {
        self.snapshot().slots.get(name).map(|s| s.plugin.clone())
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

    /// Read every plugin file again and swap in the ones whose content changed.
    pub fn reload(&self) -> Reload {
        let snapshot = self.snapshot();
        let specs = snapshot.config.plugins.clone();
        self.apply(&snapshot.config, &specs, |spec| std::fs::read(&spec.path))
    }

    /// Swap in `bytes` as the new version of plugin `name` (what a file change does,
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
        self.apply(&snapshot.config, &specs, |_| Ok(bytes.to_vec()))
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
        let (slots, mut report) = self.build_slots(&old, &config).map_err(reject)?;
        report.selectors_changed |= old.config.bindings.get(&Capability::Selector)
            != config.bindings.get(&Capability::Selector);
        self.metrics
            .swaps
            .fetch_add(report.swapped.len() as u64, Ordering::Relaxed);
        *self.current.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(Snapshot {
            config,
            file,
            resources,
            slots,
        });
        self.forget_unused();
        Ok(report)
    }

    /// The slots of `config`: a plugin whose spec and file are unchanged from `old` is
    /// kept, every other one is loaded and validated. All or nothing.
    fn build_slots(
        &self,
        old: &Snapshot,
        config: &PluginConfig,
    ) -> Result<(HashMap<String, Slot>, Reload), Vec<LoadError>> {
        let mut slots = HashMap::new();
        let mut errors = Vec::new();
        let mut report = Reload::default();
        for spec in &config.plugins {
            // Read once: the digest says whether the serving version can stay.
            let loaded = std::fs::read(&spec.path)
                .map_err(|e| LoadError {
                    plugin: spec.name.clone(),
                    path: spec.path.clone(),
                    problem: format!("cannot read: {e}"),
                })
                .and_then(|bytes| match old.slots.get(&spec.name) {
                    Some(slot) if slot.spec == *spec && slot.plugin.digest() == digest(&bytes) => {
                        Ok(slot.plugin.clone())
                    }
                    _ => {
                        let plugin = self.load_bytes(spec, &bytes)?;
                        report.selectors_changed |= plugin.has(Capability::Selector);
                        report.swapped.push(spec.name.clone());
                        Ok(plugin)
                    }
                });
            match loaded {
                Ok(plugin) => {
                    let spec = spec.clone();
                    slots.insert(spec.name.clone(), Slot { spec, plugin });
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

    fn apply(
        &self,
        config: &PluginConfig,
        specs: &[PluginSpec],
        read: impl Fn(&PluginSpec) -> std::io::Result<Vec<u8>>,
    ) -> Reload {
        let _guard = self
            .reloading
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut report = Reload::default();
        let mut fresh = Vec::new();
        let serving = self.snapshot();
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
            if serving
                .slots
                .get(&spec.name)
                .is_some_and(|slot| slot.plugin.digest() == digest(&bytes))
            {
                continue;
            }
            match self.load_bytes(spec, &bytes) {
                Ok(plugin) => {
                    tracing::info!(plugin = %spec.name, sha256 = plugin.digest(), version = %plugin.info().version, "plugin swapped");
                    report.selectors_changed |= plugin.has(Capability::Selector);
                    report.swapped.push(spec.name.clone());
                    fresh.push((spec.clone(), plugin));
                }
                Err(e) => {
                    tracing::error!(plugin = %spec.name, error = %e, "plugin version rejected; the serving version stays");
                    self.metrics.rejections.fetch_add(1, Ordering::Relaxed);
                    report.rejected.push((spec.name.clone(), e.to_string()));
                }
            }
        }
        if !fresh.is_empty() {
            let mut current = self.current.write().unwrap_or_else(PoisonError::into_inner);
            let mut slots = current.slots.clone();
            for (spec, plugin) in fresh {
                slots.insert(spec.name.clone(), Slot { spec, plugin });
            }
            *current = Arc::new(Snapshot {
                config: config.clone(),
                slots,
                ..Snapshot::clone(&current)
            });
            drop(current);
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
            .map(|s| s.plugin.digest().to_owned())
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
                Some(slot) => {
                    Bound::Plugin(slot.plugin.clone(), slot.spec.policies.get(capability))
                }
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
        let (plugin, policy) = match self.bound(Capability::Selector, named_selector(&matched)) {
            Bound::Builtin => return builtin(matched, rng),
            Bound::Unknown(name) => {
                self.unknown(name, Capability::Selector);
                return None;
            }
            Bound::Plugin(plugin, policy) => (plugin, policy),
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
        match plugin.select(&super::convert::object_json(object), &candidates) {
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
        let (plugin, policy) = match self.bound(Capability::Renderer, named) {
            Bound::Builtin => return Builtin.render(stage, template, object),
            Bound::Unknown(name) => return Err(self.unknown(name, Capability::Renderer).into()),
            Bound::Plugin(plugin, policy) => (plugin, policy),
        };
        let rendered = plugin.render(
            &stage.name,
            template.source(),
            &super::convert::object_json(object),
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
        let (plugin, policy) = match self.bound(Capability::Classifier, failure.binding) {
            Bound::Builtin => return Builtin.classify(failure),
            Bound::Unknown(name) => {
                self.unknown(name, Capability::Classifier);
                return Decision::Backoff;
            }
            Bound::Plugin(plugin, policy) => (plugin, policy),
        };
        match plugin.classify(&super::convert::failure(failure)) {
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
