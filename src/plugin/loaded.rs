//! One loaded version of one plugin: its compiled component pre-linked
//! (`InstancePre`), the capabilities it exports, its metadata, and a small pool of warm
//! instances that serve calls. A call takes an instance, sets its deadline, calls, and
//! puts it back unless it trapped, timed out or ran out of memory (such an instance is
//! dropped, never reused).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::Value;
use wasmtime::component::{Component, InstancePre};
use wasmtime::{Store, Trap};

use super::Capability;
use super::bindings::{classifier, metadata, renderer, selector, types};
use super::error::{CallError, Cause, LoadError};
use super::host::{Grants, HostEnv, State};
use super::runtime::{DigestHex, Runtime, TICK};

/// The interface version this kstage speaks.
pub const INTERFACE_VERSION: &str = "0.1.0";

thread_local! {
    static LAST_RUN: std::cell::Cell<Duration> = const { std::cell::Cell::new(Duration::ZERO) };
}

/// How long the last plugin call made on this thread ran on its instance, instantiating
/// one excluded (what a canary analysis compares: a new version's first calls start
/// fresh instances, the serving version's are warm).
pub fn last_run_time() -> Duration {
    LAST_RUN.get()
}

/// The least time an instance gets to start.
pub const INSTANTIATE_TIMEOUT: Duration = Duration::from_secs(2);

/// Limits and grants of one plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Longest a single call may run.
    pub timeout: Duration,
    /// Most linear memory an instance may have, in bytes.
    pub memory: u64,
    /// What it may see through WASI.
    pub grants: Grants,
    /// Most warm instances kept between calls.
    pub warm: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            timeout: Duration::from_millis(100),
            memory: 128 << 20,
            grants: Grants::default(),
            warm: 8,
        }
    }
}

/// What a plugin says about itself (`metadata.info`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Info {
    /// Its own name.
    pub name: String,
    /// Its own version.
    pub version: String,
    /// The interface version it was built for.
    pub interface_version: String,
}

/// Calls served per capability, and their total time.
#[derive(Debug)]
pub struct CallStats {
    /// Calls made.
    pub calls: AtomicU64,
    /// Calls that failed.
    pub failures: AtomicU64,
    /// Total microseconds spent in calls.
    pub micros: AtomicU64,
    /// Seconds per call, in buckets from 1 µs to 100 ms (three a decade).
    pub latency: prometheus_client::metrics::histogram::Histogram,
}

impl Default for CallStats {
    fn default() -> Self {
        let buckets = prometheus_client::metrics::histogram::exponential_buckets(
            1e-6,
            10f64.powf(1.0 / 3.0),
            16,
        );
        Self {
            calls: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            micros: AtomicU64::new(0),
            latency: prometheus_client::metrics::histogram::Histogram::new(buckets),
        }
    }
}

struct Indices {
    metadata: metadata::GuestIndices,
    selector: Option<selector::GuestIndices>,
    renderer: Option<renderer::GuestIndices>,
    classifier: Option<classifier::GuestIndices>,
}

/// A warm instance: its store and the exports it was found to have.
struct Warm {
    store: Store<State>,
    metadata: metadata::Guest,
    selector: Option<selector::Guest>,
    renderer: Option<renderer::Guest>,
    classifier: Option<classifier::Guest>,
}

/// One loaded, validated version of a plugin.
pub struct Plugin {
    name: Arc<str>,
    path: PathBuf,
    digest: DigestHex,
    info: Info,
    capabilities: Vec<Capability>,
    imports: Vec<String>,
    needs_wasi: bool,
    settings: Settings,
    env: HostEnv,
    runtime: Arc<Runtime>,
    pre: InstancePre<State>,
    indices: Indices,
    idle: Mutex<Vec<Warm>>,
    stats: [CallStats; 4],
    memory_high_water: AtomicU64,
}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Plugin")
            .field("name", &self.name)
            .field("digest", &self.digest)
            .field("info", &self.info)
            .field("capabilities", &self.capabilities)
            .finish_non_exhaustive()
    }
}

/// The WIT export name of a capability's interface.
fn export_name(capability: Capability) -> String {
    format!("kstage:plugin/{}@{INTERFACE_VERSION}", capability.as_str())
}

impl Plugin {
    /// Compile (or reuse) `bytes`, link it, check its exports and call `metadata.info`.
    /// Smoke calls are [`Plugin::validate`]'s job.
    pub fn load(
        runtime: &Arc<Runtime>,
        name: &str,
        path: &Path,
        bytes: &[u8],
        settings: Settings,
        env: HostEnv,
    ) -> Result<Arc<Plugin>, LoadError> {
        let problem = |problem: String| LoadError {
            plugin: name.to_owned(),
            path: path.to_owned(),
            problem,
        };
        if settings.memory > super::runtime::MAX_MEMORY {
            return Err(problem(format!(
                "memory limit {} is above the most kstage allows ({})",
                settings.memory,
                super::runtime::MAX_MEMORY
            )));
        }
        let (digest, component) = runtime.compile(bytes).map_err(problem)?;
        let exports = export_names(runtime, &component);
        let imports = import_names(runtime, &component);
        if !exports
            .iter()
            .any(|e| e == &export_name(Capability::Metadata))
        {
            let other = exports
                .iter()
                .find(|e| e.starts_with("kstage:plugin/metadata@"));
            return Err(problem(match other {
                Some(found) => format!(
                    "built for another interface version ({found}); this kstage speaks \
                     kstage:plugin@{INTERFACE_VERSION}"
                ),
                None => format!(
                    "does not export kstage:plugin/metadata@{INTERFACE_VERSION} (exports: {})",
                    list_or_none(&exports)
                ),
            }));
        }
        let pre = runtime
            .linker()
            .instantiate_pre(&component)
            .map_err(|e| problem(format!("cannot be linked: {e:#}")))?;
        let index = |capability: Capability| exports.contains(&export_name(capability));
        let typed = |e: wasmtime::Error| problem(format!("export has the wrong type: {e:#}"));
        let indices = Indices {
            metadata: metadata::GuestIndices::new(&pre).map_err(typed)?,
            selector: index(Capability::Selector)
                .then(|| selector::GuestIndices::new(&pre))
                .transpose()
                .map_err(typed)?,
            renderer: index(Capability::Renderer)
                .then(|| renderer::GuestIndices::new(&pre))
                .transpose()
                .map_err(typed)?,
            classifier: index(Capability::Classifier)
                .then(|| classifier::GuestIndices::new(&pre))
                .transpose()
                .map_err(typed)?,
        };
        let capabilities = Capability::DECISIONS
            .into_iter()
            .filter(|c| index(*c))
            .collect();
        let needs_wasi = imports.iter().any(|i| i.starts_with("wasi:"));
        let mut plugin = Plugin {
            name: name.into(),
            path: path.to_owned(),
            digest,
            info: Info {
                name: String::new(),
                version: String::new(),
                interface_version: String::new(),
            },
            capabilities,
            imports,
            needs_wasi,
            settings,
            env,
            runtime: runtime.clone(),
            pre,
            indices,
            idle: Mutex::new(Vec::new()),
            stats: Default::default(),
            memory_high_water: AtomicU64::new(0),
        };
        let info = plugin.ping().map_err(|e| problem(e.cause.to_string()))?;
        let compatible = info
            .interface_version
            .rsplit_once('.')
            .is_some_and(|(major_minor, _)| {
                INTERFACE_VERSION.starts_with(&format!("{major_minor}."))
            });
        if !compatible {
            return Err(problem(format!(
                "metadata.info says it was built for interface {:?}; this kstage speaks {INTERFACE_VERSION}",
                info.interface_version
            )));
        }
        plugin.info = info;
        Ok(Arc::new(plugin))
    }

    /// Call each capability once with a sample pod: a plugin that traps, times out or
    /// runs out of memory on it is rejected. (An `err` answer is accepted: a plugin may
    /// legitimately refuse the sample.)
    pub fn validate(&self) -> Result<(), String> {
        let pod = super::sample_pod();
        let check = |r: Result<(), CallError>| match r {
            Err(e) if e.cause.poisons() || matches!(e.cause, Cause::Malformed(_)) => {
                Err(e.to_string())
            }
            _ => Ok(()),
        };
        if self.has(Capability::Selector) {
            let candidates = [types::Candidate {
                name: "kstage-smoke".to_owned(),
                weight: 0,
                delay_ms: None,
            }];
            check(self.select(&pod, &candidates).map(drop))?;
        }
        if self.has(Capability::Renderer) {
            check(self.render("kstage-smoke", "{}", &pod).map(drop))?;
        }
        if self.has(Capability::Classifier) {
            let failure = types::Failure {
                kind: types::FailureKind::Http,
                status: Some(500),
                reason: Some("InternalError".to_owned()),
                message: "smoke test".to_owned(),
                retry_after_ms: None,
                stage: "kstage-smoke".to_owned(),
                step: 0,
                attempt: 0,
                object: pod.clone(),
            };
            check(self.classify(&failure).map(drop))?;
        }
        Ok(())
    }

    /// Log lines of this version dropped over its budget (see [`super::host::LogBudget`]).
    pub fn log_lines_dropped(&self) -> u64 {
        self.env.log.dropped()
    }

    /// The configured name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Where it was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The sha256 of its bytes.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// What `metadata.info` said.
    pub fn info(&self) -> &Info {
        &self.info
    }

    /// The decisions it can make.
    pub fn capabilities(&self) -> &[Capability] {
        &self.capabilities
    }

    /// Whether it exports `capability`.
    pub fn has(&self, capability: Capability) -> bool {
        self.capabilities.contains(&capability)
    }

    /// What the component imports (the host interface, WASI interfaces ...).
    pub fn imports(&self) -> &[String] {
        &self.imports
    }

    /// Its limits and grants.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Call statistics for `capability`.
    pub fn stats(&self, capability: Capability) -> &CallStats {
        &self.stats[capability as usize]
    }

    /// The most linear memory one instance of this version has had after a call, in
    /// bytes. A linear memory never shrinks, so on a warm instance this is the high-water
    /// mark of everything the calls it served allocated at once (a garbage-collected
    /// guest's heap with its uncollected garbage included).
    pub fn memory_high_water(&self) -> u64 {
        self.memory_high_water.load(Ordering::Relaxed)
    }

    /// Call `metadata.info` (on a warm instance, or a fresh one).
    pub fn ping(&self) -> Result<Info, CallError> {
        let info = self.call(Capability::Metadata, |warm| {
            warm.metadata.call_info(&mut warm.store)
        })?;
        Ok(Info {
            name: info.name,
            version: info.version,
            interface_version: info.interface_version,
        })
    }

    /// `selector.select`: the object as JSON text and the candidates.
    pub fn select(
        &self,
        object: &String,
        candidates: &[types::Candidate],
    ) -> Result<Option<types::Selection>, CallError> {
        let answer = self.call(Capability::Selector, |warm| match &warm.selector {
            Some(guest) => guest
                .call_select(&mut warm.store, object, candidates)
                .map(Some),
            None => Ok(None),
        })?;
        let answer = answer.ok_or_else(|| self.error(Capability::Selector, Cause::Missing))?;
        let selection = answer.map_err(|e| self.error(Capability::Selector, Cause::Guest(e)))?;
        if let Some(chosen) = &selection
            && !candidates.iter().any(|c| c.name == chosen.stage)
        {
            let names: Vec<&str> = candidates.iter().map(|c| c.name.as_str()).collect();
            return Err(self.error(
                Capability::Selector,
                Cause::Malformed(format!(
                    "chose Stage {:?}, which is not a candidate ({})",
                    chosen.stage,
                    names.join(", ")
                )),
            ));
        }
        Ok(selection)
    }

    /// `renderer.render`: the rendered JSON, parsed as the engine uses it (an answer
    /// that is not JSON is malformed).
    pub fn render(&self, stage: &str, template: &str, object: &String) -> Result<Value, CallError> {
        let answer = self.call(Capability::Renderer, |warm| match &warm.renderer {
            Some(guest) => guest
                .call_render(&mut warm.store, stage, template, object)
                .map(Some),
            None => Ok(None),
        })?;
        let answer = answer.ok_or_else(|| self.error(Capability::Renderer, Cause::Missing))?;
        let text = answer.map_err(|e| self.error(Capability::Renderer, Cause::Guest(e)))?;
        serde_json::from_str(&text).map_err(|e| {
            self.error(
                Capability::Renderer,
                Cause::Malformed(format!("rendered text is not JSON ({e}): {text}")),
            )
        })
    }

    /// `classifier.classify`.
    pub fn classify(&self, failure: &types::Failure) -> Result<types::Decision, CallError> {
        let answer = self.call(Capability::Classifier, |warm| match &warm.classifier {
            Some(guest) => guest.call_classify(&mut warm.store, failure).map(Some),
            None => Ok(None),
        })?;
        answer.ok_or_else(|| self.error(Capability::Classifier, Cause::Missing))
    }

    pub(crate) fn error(&self, capability: Capability, cause: Cause) -> CallError {
        CallError {
            plugin: self.name.to_string(),
            export: capability.export(),
            cause: cause.bounded(),
        }
    }

    /// Run `f` on a warm instance within the plugin's deadline and memory limit.
    ///
    /// A component that imports WASI is called on a thread of `super::offload` when the
    /// caller is inside a tokio runtime: wasmtime-wasi's synchronous bindings block on
    /// their own runtime and must not run on one of tokio's threads. Pure-compute plugins
    /// (the usual Rust, C and Zig ones) are called directly.
    fn call<R: Send>(
        &self,
        capability: Capability,
        f: impl FnOnce(&mut Warm) -> wasmtime::Result<R> + Send,
    ) -> Result<R, CallError> {
        let start = Instant::now();
        // The result, and how long it ran on its instance (instantiating one excluded).
        let run = || {
            let mut warm = match self.take(capability) {
                Ok(warm) => warm,
                Err(e) => return (Err(e), Duration::ZERO),
            };
            let ran = Instant::now();
            let ticks = self.settings.timeout.as_nanos().div_ceil(TICK.as_nanos()) as u64 + 1;
            warm.store.set_epoch_deadline(ticks);
            warm.store.data_mut().limits.exceeded = false;
            warm.store.data().stderr.clear();
            let result = f(&mut warm);
            self.memory_high_water
                .fetch_max(warm.store.data().limits.grown_to, Ordering::Relaxed);
            let result = match result {
                Ok(value) => {
                    self.give_back(warm);
                    Ok(value)
                }
                Err(e) => Err(self.error(capability, self.cause(&warm.store, &e))),
            };
            (result, ran.elapsed())
        };
        let (result, ran) = if self.needs_wasi && tokio::runtime::Handle::try_current().is_ok() {
            super::offload::run_off_runtime(run).unwrap_or_else(|()| {
                (
                    Err(self.error(capability, Cause::Trap("host panic".to_owned()))),
                    Duration::ZERO,
                )
            })
        } else {
            run()
        };
        LAST_RUN.set(ran);
        let stats = self.stats(capability);
        let took = start.elapsed();
        stats.calls.fetch_add(1, Ordering::Relaxed);
        stats
            .micros
            .fetch_add(took.as_micros() as u64, Ordering::Relaxed);
        stats.latency.observe(took.as_secs_f64());
        if result.is_err() {
            stats.failures.fetch_add(1, Ordering::Relaxed);
        }
        result
    }

    fn cause(&self, store: &Store<State>, e: &wasmtime::Error) -> Cause {
        if store.data().limits.exceeded {
            Cause::OutOfMemory {
                limit: self.settings.memory,
            }
        } else if matches!(e.downcast_ref::<Trap>(), Some(Trap::Interrupt)) {
            Cause::Timeout(self.settings.timeout)
        } else {
            Cause::Trap(super::trap::describe(e, &store.data().stderr.text()))
        }
    }

    fn take(&self, capability: Capability) -> Result<Warm, CallError> {
        if let Some(warm) = self.idle.lock().unwrap_or_else(|e| e.into_inner()).pop() {
            return Ok(warm);
        }
        let state = State::new(
            self.env.clone(),
            self.settings.memory,
            &self.settings.grants,
        );
        let mut store = Store::new(self.runtime.engine(), state);
        store.limiter(|state| &mut state.limits);
        store.epoch_deadline_trap();
        // Instantiating runs the component's start code (an interpreter's warm-up, for
        // JavaScript and Python plugins): it gets a deadline of its own.
        let init = self.settings.timeout.max(INSTANTIATE_TIMEOUT);
        store.set_epoch_deadline(init.as_nanos().div_ceil(TICK.as_nanos()) as u64 + 1);
        let instance = self
            .pre
            .instantiate(&mut store)
            .map_err(|e| self.error(capability, self.cause(&store, &e)))?;
        let malformed =
            |e: wasmtime::Error| self.error(capability, Cause::Malformed(first_line(&e)));
        let indices = &self.indices;
        Ok(Warm {
            metadata: indices
                .metadata
                .load(&mut store, &instance)
                .map_err(malformed)?,
            selector: indices
                .selector
                .as_ref()
                .map(|i| i.load(&mut store, &instance))
                .transpose()
                .map_err(malformed)?,
            renderer: indices
                .renderer
                .as_ref()
                .map(|i| i.load(&mut store, &instance))
                .transpose()
                .map_err(malformed)?,
            classifier: indices
                .classifier
                .as_ref()
                .map(|i| i.load(&mut store, &instance))
                .transpose()
                .map_err(malformed)?,
            store,
        })
    }

    fn give_back(&self, warm: Warm) {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if idle.len() < self.settings.warm {
            idle.push(warm);
        }
    }
}

fn first_line(e: &wasmtime::Error) -> String {
    let text = format!("{e:#}");
    text.lines().next().unwrap_or_default().to_owned()
}

fn list_or_none(names: &[String]) -> String {
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}

fn export_names(runtime: &Runtime, component: &Component) -> Vec<String> {
    component
        .component_type()
        .exports(runtime.engine())
        .map(|(name, _)| name.to_owned())
        .collect()
}

fn import_names(runtime: &Runtime, component: &Component) -> Vec<String> {
    component
        .component_type()
        .imports(runtime.engine())
        .map(|(name, _)| name.to_owned())
        .collect()
}
