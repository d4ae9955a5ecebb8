//! The daemon: the engine against an API server through kube-rs, with Stages from files
//! and, optionally, live from the cluster's Stage resources.
//!
//! With Stage resources enabled, every added, changed or deleted Stage rebuilds the set
//! (files first; a Stage resource replaces a file's Stage of the same name) and the
//! engine re-matches the objects of the kinds concerned, so a change takes effect without
//! a restart. A Stage resource that does not compile is left out, with its problems
//! logged and written to its status ([`status`]); the others keep working.
//!
//! With StagePlugin resources enabled ([`plugins`]), their components are fetched,
//! checked and swapped into the plugin set the engine's deciders are built on.

pub mod plugins;
pub mod registry;
pub mod rollout;
pub mod status;

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};
use tokio::task::JoinHandle;

use crate::cluster::client::KubeCluster;
use crate::cluster::{Cluster, ObjectKey, PatchRequest, WatchEvent};
use crate::decide::Deciders;
use crate::engine::{Engine, EngineConfig};
use crate::patch::PatchType;
use crate::stage::load::load_document;
use crate::stage::{FieldError, Origin, ResourceRef, Stage, StageSet};
use crate::template::Renderer;

/// The Stage resource.
pub fn stage_resource() -> ResourceRef {
    ResourceRef {
        api_group: "kwok.x-k8s.io/v1alpha1".into(),
        kind: "Stage".into(),
    }
}

/// A running daemon.
pub struct Daemon {
    engine: Arc<Engine<KubeCluster>>,
    tasks: Vec<JoinHandle<()>>,
    stage_events: tokio::sync::watch::Receiver<u64>,
    plugin_events: tokio::sync::watch::Receiver<u64>,
    plugin_polls: tokio::sync::watch::Receiver<u64>,
}

impl std::fmt::Debug for Daemon {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Daemon").finish_non_exhaustive()
    }
}

impl Daemon {
    /// Start playing `files` (and the cluster's Stage resources with `stage_crds`, its
    /// StagePlugin resources with `plugin_crds`).
    pub fn start(
        cluster: Arc<KubeCluster>,
        files: Vec<Stage>,
        resources: Resources,
        renderer: Renderer,
        config: EngineConfig,
        deciders: Deciders,
    ) -> Self {
        let Resources {
            stages: stage_crds,
            plugins: plugin_crds,
        } = resources;
        let files: Vec<Arc<Stage>> = files.into_iter().map(Arc::new).collect();
        let engine = Engine::with_deciders(
            cluster.clone(),
            StageSet::from_shared(files.iter().cloned()),
            config,
            deciders,
        );
        let mut tasks = engine.start();
        let (handled, stage_events) = tokio::sync::watch::channel(0);
        if let Some(resources) = stage_crds {
            let live = LiveStages::new(files, renderer, resources.known_plugin);
            tasks.push(tokio::spawn(play_stage_resources(
                cluster.clone(),
                engine.clone(),
                live,
                handled,
            )));
        }
        let (plugins_handled, plugin_events) = tokio::sync::watch::channel(0);
        let (polled, plugin_polls) = tokio::sync::watch::channel(0);
        if let Some(plugins) = plugin_crds {
            tasks.push(tokio::spawn(plugins::play_plugin_resources(
                cluster,
                engine.clone(),
                plugins,
                (plugins_handled, polled),
            )));
        }
        Self {
            engine,
            tasks,
            stage_events,
            plugin_events,
            plugin_polls,
        }
    }

    /// The engine.
    pub fn engine(&self) -> &Arc<Engine<KubeCluster>> {
        &self.engine
    }

    /// How many Stage resource watch events have been handled (the Stage set rebuilt,
    /// the status written where it needed to be); the initial list counts as one.
    pub fn stage_events(&self) -> tokio::sync::watch::Receiver<u64> {
        self.stage_events.clone()
    }

    /// How many StagePlugin watch events have been handled (reconciled when the spec
    /// changed; the initial list counts as one).
    pub fn plugin_events(&self) -> tokio::sync::watch::Receiver<u64> {
        self.plugin_events.clone()
    }

    /// How many times the StagePlugins' registry tags have been resolved again (each
    /// time reconciled, the status written only where it changed).
    pub fn plugin_polls(&self) -> tokio::sync::watch::Receiver<u64> {
        self.plugin_polls.clone()
    }

    /// Stop gracefully within `grace`: no new Stage starts, those being played are
    /// played to their end (see [`Engine::drain`]), then the tasks end. Whether every
    /// Stage ended in time.
    pub async fn stop(self, grace: std::time::Duration) -> bool {
        let drained = tokio::time::timeout(grace, self.engine.drain())
            .await
            .is_ok();
        for t in self.tasks {
            t.abort();
        }
        drained
    }

    /// Stop: no new Stage starts; the tasks end.
    pub fn shutdown(self) {
        self.engine.shutdown();
        for t in self.tasks {
            t.abort();
        }
    }
}

/// The cluster resources a daemon plays besides the objects.
#[derive(Debug, Clone, Default)]
pub struct Resources {
    /// Stage resources (`--stage-crds`).
    pub stages: Option<StageResources>,
    /// StagePlugin resources (`--plugin-crds`).
    pub plugins: Option<plugins::PluginResources>,
}

/// Names a configured plugin has (for the `UnknownPlugin` status).
pub type KnownPlugin = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// Stage resources played live from the cluster (`--stage-crds`).
#[derive(Clone)]
pub struct StageResources {
    /// Which plugin names a configured plugin provides.
    pub known_plugin: KnownPlugin,
}

impl StageResources {
    /// With no plugin configured: every plugin a Stage names is unknown.
    pub fn without_plugins() -> Self {
        Self {
            known_plugin: Arc::new(|_| false),
        }
    }
}

impl std::fmt::Debug for StageResources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StageResources").finish_non_exhaustive()
    }
}

/// Watch the Stage resources: rebuild the engine's set when what compiles changes, and
/// write each one's status (see [`status`]).
async fn play_stage_resources(
    cluster: Arc<KubeCluster>,
    engine: Arc<Engine<KubeCluster>>,
    mut live: LiveStages,
    handled: tokio::sync::watch::Sender<u64>,
) {
    let mut events = cluster.watch(&stage_resource());
    while let Some(event) = events.recv().await {
        let (changed, objects) = live.apply(event);
        if changed {
            // New resources are watched by tasks the engine owns.
            let _ = engine.set_stages(live.set());
        }
        engine
            .metrics()
            .invalid_stages
            .store(live.invalid(), std::sync::atomic::Ordering::Relaxed);
        for object in objects {
            let result = match live.status_patch(&object, chrono::Utc::now()) {
                None => "unchanged",
                Some(patch) => write_status(&cluster, &object, patch).await,
            };
            engine.metrics().stage_status(result);
        }
        handled.send_modify(|n| *n += 1);
    }
}

/// Write a Stage's status: `written`, `conflict` or `failed`.
async fn write_status(cluster: &KubeCluster, object: &Value, data: Value) -> &'static str {
    let resource = stage_resource();
    let key = ObjectKey {
        api_version: resource.api_group,
        kind: resource.kind,
        namespace: String::new(),
        name: LiveStages::name(object),
    };
    let request = PatchRequest {
        patch_type: PatchType::Merge,
        subresource: Some("status"),
        data,
        as_user: None,
    };
    match cluster.patch(&key, request).await {
        Ok(_) => {
            tracing::debug!(stage = key.name, "Stage status written");
            "written"
        }
        // Changed meanwhile (another replica, an edit): the newer version comes by the
        // watch and is looked at again.
        Err(e) if matches!(e.status, Some(404 | 409)) => {
            tracing::debug!(stage = key.name, "Stage status not written: {}", e.message);
            "conflict"
        }
        Err(e) => {
            tracing::warn!(
                stage = key.name,
                "cannot write the Stage's status: {}",
                e.message
            );
            "failed"
        }
    }
}

/// One Stage resource as last compiled.
struct Entry {
    /// What compiling reads of it (`spec` and the annotations): an update that changes
    /// neither (a status write, a label) is not compiled again.
    input: Value,
    stage: Result<Arc<Stage>, Vec<FieldError>>,
}

/// The Stages from files and from Stage resources.
struct LiveStages {
    files: Vec<Arc<Stage>>,
    resources: BTreeMap<String, Entry>,
    renderer: Renderer,
    known_plugin: KnownPlugin,
}

impl LiveStages {
    fn new(files: Vec<Arc<Stage>>, renderer: Renderer, known_plugin: KnownPlugin) -> Self {
        Self {
            files,
            resources: BTreeMap::new(),
            renderer,
            known_plugin,
        }
    }

    fn name(object: &Value) -> String {
        object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    }

    fn input(object: &Value) -> Value {
        json!([object.get("spec"), object.pointer("/metadata/annotations")])
    }

    fn compile(&self, object: &Value) -> Entry {
        let origin = Origin {
            file: None,
            document: 0,
        };
        let stage = match load_document(object, origin, &self.renderer) {
            Ok(Some(stage)) => Ok(Arc::new(stage)),
            Ok(None) => Err(vec![FieldError::new("kind", "not a Stage")]),
            Err((name, problems)) => {
                let list: Vec<String> = problems.iter().map(ToString::to_string).collect();
                tracing::warn!(
                    stage = name.as_deref().unwrap_or("?"),
                    "Stage resource left out: {}",
                    list.join("; ")
                );
                Err(problems)
            }
        };
        Entry {
            input: Self::input(object),
            stage,
        }
    }

    /// Take a watch event: whether the set of Stages in play changed, and the Stage
    /// objects whose status to look at.
    fn apply(&mut self, event: WatchEvent) -> (bool, Vec<Arc<Value>>) {
        match event {
            WatchEvent::Restarted(objects) => {
                let mut resources = BTreeMap::new();
                for o in &objects {
                    resources.insert(Self::name(o), self.compile(o));
                }
                self.resources = resources;
                (true, objects)
            }
            WatchEvent::Applied(o) => {
                let name = Self::name(&o);
                let same = self
                    .resources
                    .get(&name)
                    .is_some_and(|e| e.input == Self::input(&o));
                if !same {
                    let entry = self.compile(&o);
                    self.resources.insert(name, entry);
                }
                (!same, vec![o])
            }
            WatchEvent::Deleted(o) => {
                (self.resources.remove(&Self::name(&o)).is_some(), Vec::new())
            }
        }
    }

    /// Stage resources left out.
    fn invalid(&self) -> u64 {
        self.resources.values().filter(|e| e.stage.is_err()).count() as u64
    }

    /// The status write `object` needs, if any.
    fn status_patch(&self, object: &Value, now: chrono::DateTime<chrono::Utc>) -> Option<Value> {
        let entry = self.resources.get(&Self::name(object))?;
        let compiled = match &entry.stage {
            Ok(stage) => status::Compiled::unknown_plugins(stage, &*self.known_plugin)
                .unwrap_or_else(|| status::Compiled::valid(stage)),
            Err(problems) => status::Compiled::invalid(problems),
        };
        status::patch(object, &compiled, now)
    }

    fn set(&self) -> StageSet {
        let files = self
            .files
            .iter()
            .filter(|s| !self.resources.contains_key(&s.name));
        let resources = self.resources.values().filter_map(|e| e.stage.clone().ok());
        StageSet::from_shared(files.cloned().chain(resources))
    }
}
