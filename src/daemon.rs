//! The daemon: the engine against an API server through kube-rs, with Stages from files
//! and, optionally, live from the cluster's Stage resources.
//!
//! With Stage resources enabled, every added, changed or deleted Stage rebuilds the set
//! (files first; a Stage resource replaces a file's Stage of the same name) and the
//! engine re-matches the objects of the kinds concerned, so a change takes effect without
//! a restart. A Stage resource that does not compile is left out, with its problems
//! logged; the others keep working.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;
use tokio::task::JoinHandle;

use crate::cluster::client::KubeCluster;
use crate::cluster::{Cluster, WatchEvent};
use crate::decide::Deciders;
use crate::engine::{Engine, EngineConfig};
use crate::stage::load::load_document;
use crate::stage::{Origin, ResourceRef, Stage, StageSet};
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
}

impl std::fmt::Debug for Daemon {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Daemon").finish_non_exhaustive()
    }
}

impl Daemon {
    /// Start playing `files` (and the cluster's Stage resources when `stage_crds`).
    pub fn start(
        cluster: Arc<KubeCluster>,
        files: Vec<Stage>,
        stage_crds: bool,
        renderer: Renderer,
        config: EngineConfig,
        deciders: Deciders,
    ) -> Self {
        let files: Vec<Arc<Stage>> = files.into_iter().map(Arc::new).collect();
        let engine = Engine::with_deciders(
            cluster.clone(),
            StageSet::from_shared(files.iter().cloned()),
            config,
            deciders,
        );
        let mut tasks = engine.start();
        if stage_crds {
            let engine = engine.clone();
            let mut events = cluster.watch(&stage_resource());
            tasks.push(tokio::spawn(async move {
                let mut live = LiveStages::new(files, renderer);
                while let Some(event) = events.recv().await {
                    if live.apply(event) {
                        // New resources are watched by tasks the engine owns.
                        let _ = engine.set_stages(live.set());
                    }
                }
            }));
        }
        Self { engine, tasks }
    }

    /// The engine.
    pub fn engine(&self) -> &Arc<Engine<KubeCluster>> {
        &self.engine
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

/// The Stages from files and from Stage resources.
struct LiveStages {
    files: Vec<Arc<Stage>>,
    resources: BTreeMap<String, Arc<Stage>>,
    renderer: Renderer,
}

impl LiveStages {
    fn new(files: Vec<Arc<Stage>>, renderer: Renderer) -> Self {
        Self {
            files,
            resources: BTreeMap::new(),
            renderer,
        }
    }

    fn name(object: &Value) -> String {
        object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    }

    fn compile(&self, object: &Value) -> Option<Arc<Stage>> {
        let origin = Origin {
            file: None,
            document: 0,
        };
        match load_document(object, origin, &self.renderer) {
            Ok(stage) => stage.map(Arc::new),
            Err((name, problems)) => {
                let list: Vec<String> = problems.iter().map(ToString::to_string).collect();
                tracing::warn!(
                    stage = name.as_deref().unwrap_or("?"),
                    "Stage resource left out: {}",
                    list.join("; ")
                );
                None
            }
        }
    }

    /// Take a watch event; whether the set changed.
    fn apply(&mut self, event: WatchEvent) -> bool {
        match event {
            WatchEvent::Restarted(objects) => {
                let mut resources = BTreeMap::new();
                for o in &objects {
                    if let Some(stage) = self.compile(o) {
                        resources.insert(Self::name(o), stage);
                    }
                }
                self.resources = resources;
                true
            }
            WatchEvent::Applied(o) => {
                let name = Self::name(&o);
                match self.compile(&o) {
                    Some(stage) => self.resources.insert(name, stage),
                    None => self.resources.remove(&name),
                };
                true
            }
            WatchEvent::Deleted(o) => self.resources.remove(&Self::name(&o)).is_some(),
        }
    }

    fn set(&self) -> StageSet {
        let files = self
            .files
            .iter()
            .filter(|s| !self.resources.contains_key(&s.name));
        StageSet::from_shared(files.chain(self.resources.values()).cloned())
    }
}
