//! StagePlugin resources (`kstage run --plugin-crds`): each one's component is fetched (a
//! ConfigMap key read through the API, a download, or a pull from an OCI registry, see
//! [`super::registry`]), checked against its `sha256`,
//! validated and hot-swapped into the plugin set beside the `--config` file's plugins;
//! its status, and a Warning Event when something failed, say what happened.
//!
//! A version that cannot be fetched, does not match its digest or fails validation
//! leaves the previous version serving (if there was one). Deleting a StagePlugin
//! unbinds it: the built-in behaviour resumes. A ConfigMap edited in place is fetched
//! again (each referenced ConfigMap is watched by name); a registry tag is resolved
//! again every `pollInterval` (the shortest of them), and the version it moves to is
//! swapped in (or analysed, per its `rollout`) like any new version.
//!
//! Every change reconciles every StagePlugin (there are a few): the outcome depends only
//! on the resources, the ConfigMaps and the file config, so replicas reach the same
//! status and write it once (see [`super::status`]).
//!
//! Conditions: `Fetched` (reasons `Fetched`, `InvalidSpec`, `FetchFailed`,
//! `DigestMismatch`; from a registry also `RegistryUnreachable`, `AuthRefused`,
//! `NotFound`, `NotWasmArtifact`, `PullSecretInvalid`), `Validated` (`Validated`, `ValidationFailed`, `NameConflict`,
//! `BindConflict`; `Unknown` when nothing was fetched), `Ready` (`Serving`, else the
//! failure's reason). `status.digest`, `version` and `interfaceVersion` describe the
//! version serving.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use serde_json::{Map, Value, json};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use super::rollout::{Record, figures_patch};
use super::status::{Condition, patch_status};
use crate::cluster::client::KubeCluster;
use crate::cluster::event::Involved;
use crate::cluster::{Cluster, EventRequest, ObjectKey, PatchRequest, WatchEvent};
use crate::engine::Engine;
use crate::patch::PatchType;
use crate::plugin::config::{PluginConfig, PluginSpec};
use crate::plugin::resource::{ResourcePlugin, Source, stage_plugin_resource};
use crate::plugin::rollout::{Outcome, Phase, Tally};
use crate::plugin::runtime::digest;
use crate::plugin::set::RolloutReport;
use crate::plugin::{Capability, PluginSet};

/// What `--plugin-crds` needs.
#[derive(Debug, Clone)]
pub struct PluginResources {
    /// The set the plugins are swapped into (the engine's deciders are built on it).
    pub set: Arc<PluginSet>,
    /// Where fetched components are kept, by digest.
    pub cache: PathBuf,
    /// This replica's name, under which it writes its rollout figures.
    pub replica: String,
    /// How often a rollout's figures are written and its time checked.
    pub status_interval: Duration,
}

/// [`PluginResources::status_interval`] by default.
pub const STATUS_INTERVAL: Duration = Duration::from_secs(5);

/// Why a StagePlugin's spec is not what serves.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Failure {
    /// `Fetched` or `Validated`.
    condition: &'static str,
    reason: &'static str,
    message: String,
}

impl Failure {
    fn fetch(reason: &'static str, message: String) -> Self {
        Self {
            condition: "Fetched",
            reason,
            message,
        }
    }

    fn validate(reason: &'static str, message: String) -> Self {
        Self {
            condition: "Validated",
            reason,
            message,
        }
    }

    /// The spec's version was rolled back and the one it replaced cannot serve here.
    fn rollout(message: String) -> Self {
        Self {
            condition: "Rollout",
            reason: "RolledBack",
            message,
        }
    }
}

/// A StagePlugin's plugin as the set takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Candidate {
    spec: PluginSpec,
    bind: Vec<Capability>,
}

struct Controller {
    cluster: Arc<KubeCluster>,
    engine: Arc<Engine<KubeCluster>>,
    set: Arc<PluginSet>,
    cache: PathBuf,
    /// The StagePlugin objects, by name.
    objects: BTreeMap<String, Arc<Value>>,
    /// What serves for each, as last accepted.
    serving: BTreeMap<String, Candidate>,
    /// A watch per referenced ConfigMap (namespace, name).
    config_maps: HashMap<(String, String), JoinHandle<()>>,
    nudge: mpsc::UnboundedSender<()>,
    replica: String,
    /// The last rollout decided for each plugin (by this replica or another), until
    /// the spec asks for another version.
    decided: BTreeMap<String, Record>,
    /// The figures this replica last wrote, per plugin.
    written: BTreeMap<String, (Tally, Tally)>,
    /// The digest each plugin's spec asks for: its `sha256`, or what its registry
    /// reference last resolved to.
    wanted: BTreeMap<String, String>,
    /// When the registry tags are resolved again (the shortest `pollInterval`).
    poll_at: Option<tokio::time::Instant>,
}

/// Watch the StagePlugin resources (and the ConfigMaps they name) and keep the plugin set
/// and their status in line; `handled` counts the StagePlugin watch events handled,
/// `polled` the rounds of registry polls.
pub(super) async fn play_plugin_resources(
    cluster: Arc<KubeCluster>,
    engine: Arc<Engine<KubeCluster>>,
    resources: PluginResources,
    (handled, polled): (
        tokio::sync::watch::Sender<u64>,
        tokio::sync::watch::Sender<u64>,
    ),
) {
    let (nudge, mut nudged) = mpsc::unbounded_channel();
    let proposals = resources.set.proposals();
    let mut controller = Controller {
        cluster: cluster.clone(),
        engine,
        set: resources.set,
        cache: resources.cache,
        objects: BTreeMap::new(),
        serving: BTreeMap::new(),
        config_maps: HashMap::new(),
        nudge,
        replica: resources.replica,
        decided: BTreeMap::new(),
        written: BTreeMap::new(),
        wanted: BTreeMap::new(),
        poll_at: None,
    };
    let mut tick = tokio::time::interval(resources.status_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut events = cluster.watch(&stage_plugin_resource());
    loop {
        tokio::select! {
            event = events.recv() => {
                let Some(event) = event else { break };
                // A status write (this replica's or another's) or a label changes
                // nothing to reconcile, but may record a verdict to follow.
                if controller.take(event) {
                    controller.reconcile().await;
                }
                controller.roll_out(false).await;
                handled.send_modify(|n| *n += 1);
            }
            Some(()) = nudged.recv() => {
                // A burst of ConfigMap events is one reconciliation.
                while nudged.try_recv().is_ok() {}
                controller.reconcile().await;
            }
            () = proposals.notified() => controller.roll_out(false).await,
            () = poll(controller.poll_at) => {
                // A tag may have moved: resolved again (its status said once if the
                // registry cannot be reached).
                controller.reconcile().await;
                polled.send_modify(|n| *n += 1);
            }
            _ = tick.tick() => controller.roll_out(true).await,
        }
    }
    for (_, task) in controller.config_maps.drain() {
        task.abort();
    }
}

impl Controller {
    /// Take a watch event: whether the plugins to serve may have changed (a restart, a
    /// deletion, a new `spec`).
    fn take(&mut self, event: WatchEvent) -> bool {
        let name = |o: &Value| {
            o.pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned()
        };
        match event {
            WatchEvent::Restarted(all) => {
                self.objects = all.into_iter().map(|o| (name(&o), o)).collect();
                true
            }
            WatchEvent::Applied(o) => {
                let same = self
                    .objects
                    .get(&name(&o))
                    .is_some_and(|old| old.get("spec") == o.get("spec"));
                self.objects.insert(name(&o), o);
                !same
            }
            WatchEvent::Deleted(o) => self.objects.remove(&name(&o)).is_some(),
        }
    }

    async fn reconcile(&mut self) {
        let mut wanted: BTreeMap<String, Result<Candidate, Failure>> = BTreeMap::new();
        let mut referenced = Vec::new();
        let objects = self.objects.clone();
        for (name, object) in &objects {
            let parsed = ResourcePlugin::parse(object);
            if let Ok(ResourcePlugin {
                source:
                    Source::ConfigMap {
                        namespace, name, ..
                    },
                ..
            }) = &parsed
            {
                referenced.push((namespace.clone(), name.clone()));
            }
            let candidate = match parsed {
                Err(e) => Err(Failure::fetch("InvalidSpec", e)),
                Ok(plugin) => self.candidate(object, &plugin).await,
            };
            wanted.insert(name.clone(), candidate);
        }
        self.watch_config_maps(referenced);
        self.wanted.retain(|name, _| objects.contains_key(name));
        self.poll_at = next_poll(&objects);
        let mut failures: BTreeMap<String, Failure> = BTreeMap::new();
        // Name and binding conflicts, decided before loading anything: with the file
        // config, then between resources in name order (the first keeps the binding).
        let mut bound: BTreeMap<Capability, String> = BTreeMap::new();
        for (name, candidate) in &wanted {
            let Ok(candidate) = candidate else { continue };
            if self.set.file_has(name) {
                failures.insert(
                    name.clone(),
                    Failure::validate(
                        "NameConflict",
                        "the --config file has a plugin of this name too: define it one way only"
                            .into(),
                    ),
                );
                continue;
            }
            for capability in &candidate.bind {
                let holder = self
                    .set
                    .file_binding(*capability)
                    .map(|p| format!("the --config file binds it to {p:?}"))
                    .or_else(|| {
                        bound
                            .get(capability)
                            .map(|p| format!("StagePlugin {p:?} binds it"))
                    });
                if let Some(holder) = holder {
                    failures.insert(
                        name.clone(),
                        Failure::validate(
                            "BindConflict",
                            format!("spec.bind: {capability}: {holder}"),
                        ),
                    );
                }
            }
            if !failures.contains_key(name) {
                for capability in &candidate.bind {
                    bound.insert(*capability, name.clone());
                }
            }
        }
        for (name, candidate) in &wanted {
            if let Err(failure) = candidate {
                failures.insert(name.clone(), failure.clone());
            }
        }
        // What to serve: the wanted version, else the one serving (kept), else nothing.
        let mut chosen: BTreeMap<String, Candidate> = BTreeMap::new();
        for name in self.objects.keys() {
            match (&wanted[name], failures.contains_key(name)) {
                (Ok(candidate), false) => {
                    chosen.insert(name.clone(), candidate.clone());
                }
                _ => {
                    if let Some(serving) = self.serving.get(name) {
                        chosen.insert(name.clone(), serving.clone());
                    }
                }
            }
        }
        // Install; a plugin the set rejects falls back to its serving version (or out),
        // and the rest is tried again: each round has one plugin fewer to blame.
        loop {
            let config = PluginConfig {
                plugins: chosen.values().map(|c| c.spec.clone()).collect(),
                bindings: chosen
                    .iter()
                    .flat_map(|(name, c)| c.bind.iter().map(move |cap| (*cap, name.clone())))
                    .collect(),
            };
            let set = self.set.clone();
            let installed =
                tokio::task::spawn_blocking(move || set.reconfigure_resources(config)).await;
            let errors = match installed {
                Ok(Ok(report)) => {
                    if !report.swapped.is_empty() {
                        tracing::info!(plugins = ?report.swapped, "StagePlugin versions swapped in");
                    }
                    if report.selectors_changed {
                        // Objects are matched again under the new selection.
                        self.rematch();
                    }
                    break;
                }
                Ok(Err(errors)) => errors,
                Err(e) => {
                    tracing::error!("StagePlugin install failed: {e}");
                    return;
                }
            };
            for e in errors {
                let name = e.plugin.clone();
                failures
                    .entry(name.clone())
                    .or_insert_with(|| Failure::validate("ValidationFailed", e.problem.clone()));
                let fallback = self
                    .serving
                    .get(&name)
                    .filter(|s| chosen.get(&name) != Some(*s));
                match fallback {
                    Some(serving) => {
                        chosen.insert(name, serving.clone());
                    }
                    None => {
                        chosen.remove(&name);
                    }
                }
            }
        }
        self.serving = chosen;
        let objects: Vec<Arc<Value>> = self.objects.values().cloned().collect();
        for object in objects {
            let name = object["metadata"]["name"].as_str().unwrap_or("").to_owned();
            let shown = self.shown(&object, failures.get(&name));
            self.write_status(&object, &shown).await;
        }
    }

    /// The cached file of `plugin`'s component, fetched and checked, and its digest.
    async fn fetch(&self, plugin: &ResourcePlugin) -> Result<(PathBuf, String), Failure> {
        let pinned = plugin.sha256.clone().unwrap_or_default();
        match &plugin.source {
            Source::Oci {
                source,
                pull_secret,
            } => {
                let pulled =
                    super::registry::pull(&self.cluster, source, pull_secret.as_ref(), &self.cache)
                        .await
                        .map_err(|(reason, message)| Failure::fetch(reason, message))?;
                Ok((pulled.path, pulled.sha256))
            }
            Source::Url(url) => {
                let (url, sha, cache) = (url.clone(), pinned.clone(), self.cache.clone());
                let fetched = tokio::task::spawn_blocking(move || {
                    crate::plugin::fetch::fetch(&url, &sha, &cache)
                })
                .await
                .map_err(|e| Failure::fetch("FetchFailed", e.to_string()))?;
                fetched.map(|path| (path, pinned)).map_err(|e| {
                    let reason = if e.contains("sha256 mismatch") {
                        "DigestMismatch"
                    } else {
                        "FetchFailed"
                    };
                    Failure::fetch(reason, e)
                })
            }
            Source::ConfigMap {
                namespace,
                name,
                key,
            } => {
                let at = format!("ConfigMap {namespace}/{name}");
                let object = self
                    .cluster
                    .get(&ObjectKey {
                        api_version: "v1".into(),
                        kind: "ConfigMap".into(),
                        namespace: namespace.clone(),
                        name: name.clone(),
                    })
                    .await
                    .map_err(|e| Failure::fetch("FetchFailed", format!("{at}: {}", e.message)))?;
                let text = object
                    .pointer("/binaryData")
                    .and_then(|d| d.get(key))
                    .and_then(Value::as_str)
                    .ok_or_else(|| {
                        Failure::fetch("FetchFailed", format!("{at}: no key {key:?} in binaryData"))
                    })?;
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(text)
                    .map_err(|e| {
                        Failure::fetch("FetchFailed", format!("{at}: binaryData.{key}: {e}"))
                    })?;
                let found = digest(&bytes);
                if found != pinned {
                    return Err(Failure::fetch(
                        "DigestMismatch",
                        format!("{at} key {key}: sha256 is {found}, spec.sha256 says {pinned}"),
                    ));
                }
                crate::plugin::fetch::store(&self.cache, &found, &bytes)
                    .map(|path| (path, found))
                    .map_err(|e| {
                        Failure::fetch(
                            "FetchFailed",
                            format!("cache {}: {e}", self.cache.display()),
                        )
                    })
            }
        }
    }

    /// Watch each ConfigMap in `referenced` by name (new ones started, unreferenced ones
    /// stopped); a change nudges a reconciliation.
    fn watch_config_maps(&mut self, referenced: Vec<(String, String)>) {
        self.config_maps.retain(|key, task| {
            let keep = referenced.contains(key);
            if !keep {
                task.abort();
            }
            keep
        });
        for (namespace, name) in referenced {
            if self
                .config_maps
                .contains_key(&(namespace.clone(), name.clone()))
            {
                continue;
            }
            let api: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
                kube::Api::namespaced(self.cluster.client().clone(), &namespace);
            let config =
                kube::runtime::watcher::Config::default().fields(&format!("metadata.name={name}"));
            let nudge = self.nudge.clone();
            let task = tokio::spawn(async move {
                use futures_util::StreamExt as _;
                use kube::runtime::WatchStreamExt as _;
                let mut changes = kube::runtime::watcher(api, config)
                    .default_backoff()
                    .boxed();
                let mut listed = false;
                while let Some(event) = changes.next().await {
                    match event {
                        Ok(kube::runtime::watcher::Event::InitDone) => listed = true,
                        // The first list is what the reconciliation already read.
                        Ok(
                            kube::runtime::watcher::Event::Apply(_)
                            | kube::runtime::watcher::Event::Delete(_),
                        ) if listed && nudge.send(()).is_err() => return,
                        _ => {}
                    }
                }
            });
            self.config_maps.insert((namespace, name), task);
        }
    }

    /// What to serve for `plugin`: its component, fetched and checked; or, when its
    /// version is recorded as rolled back and this replica serves nothing for it yet (it
    /// started after the verdict), the version it replaced, from the cache.
    async fn candidate(
        &mut self,
        object: &Value,
        plugin: &ResourcePlugin,
    ) -> Result<Candidate, Failure> {
        let candidate = |path: PathBuf, sha256: &str| Candidate {
            spec: PluginSpec {
                name: plugin.name.clone(),
                path,
                sha256: Some(sha256.to_owned()),
                settings: plugin.settings.clone(),
                policies: plugin.policies,
                rollout: plugin.rollout,
                oci: None,
            },
            bind: plugin.bind.clone(),
        };
        // A registry tag tells the digest wanted only once resolved.
        let (fetched, wanted) = match &plugin.sha256 {
            Some(sha) => (None, sha.clone()),
            None => {
                let (path, sha) = self.fetch(plugin).await?;
                (Some(path), sha)
            }
        };
        self.wanted.insert(plugin.name.clone(), wanted.clone());
        let rolled_back = self
            .decided
            .get(&plugin.name)
            .cloned()
            .or_else(|| Record::read(object))
            .filter(|r| r.digest == wanted && r.outcome == Some(Outcome::RolledBack));
        if let Some(record) = rolled_back {
            self.decided.insert(plugin.name.clone(), record.clone());
            if self.set.plugin(&plugin.name).is_none() {
                let stable = object
                    .pointer("/status/digest")
                    .and_then(Value::as_str)
                    .filter(|d| *d != wanted)
                    .map(str::to_owned);
                let cached = stable.as_ref().and_then(|sha| {
                    let path = self.cache.join(format!("{sha}.wasm"));
                    std::fs::read(&path)
                        .is_ok_and(|b| digest(&b) == *sha)
                        .then_some((path, sha))
                });
                return match cached {
                    Some((path, sha)) => Ok(candidate(path, sha)),
                    None => Err(Failure::rollout(format!(
                        "{}; the version it replaced ({}) is not in this replica's cache",
                        record.message,
                        stable.as_deref().unwrap_or("none recorded")
                    ))),
                };
            }
            // The set refuses the version rolled back and keeps the one serving.
        }
        match fetched {
            Some(path) => Ok(candidate(path, &wanted)),
            None => self
                .fetch(plugin)
                .await
                .map(|(path, sha)| candidate(path, &sha)),
        }
    }

    /// Move the StagePlugins' rollouts along: decide the analyses whose time is up,
    /// apply a verdict another replica recorded, record this replica's verdicts (the
    /// first written is the one every replica applies) and, with `figures`, write this
    /// replica's figures.
    async fn roll_out(&mut self, figures: bool) {
        let set = self.set.clone();
        let folded = tokio::task::spawn_blocking(move || set.settle_rollouts())
            .await
            .unwrap_or_default();
        if folded.selectors_changed {
            self.rematch();
        }
        for report in self.set.rollouts() {
            let Some(object) = self.objects.get(&report.plugin).cloned() else {
                continue; // a --config file's plugin: the set settles it
            };
            let recorded = Record::read(&object)
                .filter(|r| r.digest == report.canary.digest())
                .filter(|r| r.outcome.is_some_and(|o| o != Outcome::Superseded));
            match (&report.phase, recorded) {
                (Phase::Settled(_), _) => {}
                (_, Some(record)) => {
                    tracing::info!(plugin = %report.plugin, by = ?record.decided_by, "applying the rollout verdict recorded in the status");
                    self.apply(&report, record, &object, None).await;
                }
                (Phase::Proposed(verdict), None) => {
                    let record = Record::decided(&report, verdict, &self.replica);
                    let shown = Shown {
                        failure: None,
                        serving: match verdict.outcome {
                            Outcome::Promoted => Some(report.canary.clone()),
                            _ => Some(report.stable.clone()),
                        },
                        record: Some(record.clone()),
                        figures: Some(&report),
                    };
                    if self.write_status(&object, &shown).await == Written::Took {
                        self.apply(&report, record, &object, Some(verdict.outcome))
                            .await;
                    }
                }
                (Phase::Analysing, None) => {
                    let figures_now = (report.stable_figures, report.canary_figures);
                    if figures && self.written.get(&report.plugin) != Some(&figures_now) {
                        self.write_figures(&report).await;
                        self.written.insert(report.plugin.clone(), figures_now);
                    }
                }
            }
        }
    }

    /// Apply the verdict `record` holds to `report`'s rollout; `event`: this replica
    /// recorded it (and says so with an Event).
    async fn apply(
        &mut self,
        report: &RolloutReport,
        record: Record,
        object: &Value,
        event: Option<Outcome>,
    ) {
        let Some(verdict) = record.verdict() else {
            return;
        };
        let set = self.set.clone();
        let (name, digest) = (report.plugin.clone(), report.canary.digest().to_owned());
        let applied = tokio::task::spawn_blocking(move || set.settle(&name, &digest, verdict))
            .await
            .unwrap_or(false);
        if !applied {
            return;
        }
        self.written.remove(&report.plugin);
        self.decided.insert(report.plugin.clone(), record.clone());
        if report.canary.has(Capability::Selector) {
            self.rematch();
        }
        if let Some(outcome) = event {
            let key = stage_plugin_key(&report.plugin);
            let (event_type, reason) = match outcome {
                Outcome::Promoted => ("Normal", "Promoted"),
                _ => ("Warning", "RolledBack"),
            };
            let message = format!(
                "version {:?} ({}): {}",
                record.version, record.digest, record.message
            );
            self.send_event(&key, None, event_type, reason, message)
                .await;
        } else {
            // Another replica recorded it: the status already says so.
            let shown = self.shown(object, None);
            self.write_status(object, &shown).await;
        }
    }

    /// Objects matched again (a selector plugin's version changed).
    fn rematch(&self) {
        let stages = (*self.engine.stages()).clone();
        let _ = self.engine.set_stages(stages);
    }

    async fn write_figures(&self, report: &RolloutReport) {
        let key = stage_plugin_key(&report.plugin);
        let request = PatchRequest {
            patch_type: PatchType::Merge,
            subresource: Some("status"),
            data: figures_patch(&self.replica, report, chrono::Utc::now()),
            as_user: None,
        };
        if let Err(e) = self.cluster.patch(&key, request).await {
            tracing::debug!(
                plugin = key.name,
                "rollout figures not written: {}",
                e.message
            );
        }
    }

    /// Record an event about the StagePlugin `key` (`object`: as last written, when at
    /// hand, for the Event's uid and version).
    async fn send_event(
        &self,
        key: &ObjectKey,
        object: Option<&Value>,
        event_type: &str,
        reason: &str,
        message: String,
    ) {
        let event = EventRequest {
            event_type: event_type.into(),
            reason: reason.into(),
            message,
            name: None,
            involved: object.map(|o| Involved::of(key, o)).unwrap_or_default(),
        };
        if let Err(e) = self.cluster.event(key, &event).await {
            tracing::warn!(
                plugin = key.name,
                "cannot record the {event_type} event: {}",
                e.message
            );
        }
    }

    /// What the status of `object` shows after a reconciliation that ended in `failure`.
    fn shown<'a>(&self, object: &Value, failure: Option<&'a Failure>) -> Shown<'a> {
        let name = object["metadata"]["name"].as_str().unwrap_or("");
        let wanted = object
            .pointer("/spec/sha256")
            .and_then(Value::as_str)
            .map(str::to_ascii_lowercase)
            .or_else(|| self.wanted.get(name).cloned());
        let record = match self.set.rollouts().into_iter().find(|r| r.plugin == name) {
            Some(report) if !matches!(report.phase, Phase::Settled(_)) => Some(Record::of(&report)),
            _ => self
                .decided
                .get(name)
                .filter(|r| Some(&r.digest) == wanted.as_ref())
                .filter(|r| r.outcome != Some(Outcome::Superseded))
                .cloned(),
        };
        Shown {
            failure,
            serving: self
                .set
                .plugin(name)
                .filter(|_| self.serving.contains_key(name)),
            record,
            figures: None,
        }
    }

    /// Write what `shown` says into `object`'s status (with its `resourceVersion` as a
    /// precondition, only when it says something new); a failure is told once, by an
    /// Event from the replica whose write took.
    async fn write_status(&self, object: &Value, shown: &Shown<'_>) -> Written {
        let name = object["metadata"]["name"].as_str().unwrap_or("").to_owned();
        let condition = |kind, ok, reason: &str, message: String| Condition {
            kind,
            ok,
            reason: reason.to_owned(),
            message,
        };
        let keeps = match &shown.serving {
            Some(p) => format!(
                "; version {:?} ({}) keeps serving",
                p.info().version,
                p.digest()
            ),
            None => "; nothing serves".to_owned(),
        };
        let fetched = || {
            condition(
                "Fetched",
                Some(true),
                "Fetched",
                if object.pointer("/spec/sha256").is_some() {
                    "the component matches spec.sha256".into()
                } else {
                    "pulled, the component matches its layer digest".into()
                },
            )
        };
        let validated = || {
            condition(
                "Validated",
                Some(true),
                "Validated",
                "loaded, exports checked, metadata.info answered".into(),
            )
        };
        let record = shown.record.as_ref();
        let mut conditions = match (shown.failure, record.map(|r| r.outcome)) {
            (Some(f), _) if f.condition == "Fetched" => vec![
                condition("Fetched", Some(false), f.reason, f.message.clone()),
                condition(
                    "Validated",
                    None,
                    "NotFetched",
                    "nothing to validate".into(),
                ),
                condition(
                    "Ready",
                    Some(false),
                    f.reason,
                    format!("{}{keeps}", f.message),
                ),
            ],
            (Some(f), _) if f.condition == "Validated" => vec![
                fetched(),
                condition("Validated", Some(false), f.reason, f.message.clone()),
                condition(
                    "Ready",
                    Some(false),
                    f.reason,
                    format!("{}{keeps}", f.message),
                ),
            ],
            (Some(f), _) => vec![
                fetched(),
                validated(),
                condition(
                    "Ready",
                    Some(false),
                    f.reason,
                    format!("{}{keeps}", f.message),
                ),
                condition("Rollout", Some(false), f.reason, f.message.clone()),
            ],
            (None, Some(None)) => vec![
                fetched(),
                validated(),
                condition(
                    "Ready",
                    None,
                    "Analysing",
                    record.map(|r| r.message.clone()).unwrap_or_default(),
                ),
            ],
            (None, Some(Some(Outcome::RolledBack))) => vec![
                fetched(),
                validated(),
                condition(
                    "Ready",
                    Some(false),
                    "RolledBack",
                    format!(
                        "rolled back: {}{keeps}",
                        record.map(|r| r.message.as_str()).unwrap_or_default()
                    ),
                ),
            ],
            (None, _) => vec![
                fetched(),
                validated(),
                condition(
                    "Ready",
                    Some(true),
                    "Serving",
                    "this version decides".into(),
                ),
            ],
        };
        if let Some(r) = record
            && shown.failure.is_none()
        {
            let (ok, reason) = match r.outcome {
                None => (None, "Analysing"),
                Some(Outcome::Promoted) => (Some(true), "Promoted"),
                Some(other) => (Some(false), other.as_str()),
            };
            conditions.push(condition("Rollout", ok, reason, r.message.clone()));
        }
        let mut fields = Map::new();
        match &shown.serving {
            Some(p) => {
                fields.insert("digest".into(), json!(p.digest()));
                fields.insert("version".into(), json!(p.info().version));
                fields.insert("interfaceVersion".into(), json!(p.info().interface_version));
            }
            None => {
                for field in ["digest", "version", "interfaceVersion"] {
                    fields.insert(field.into(), Value::Null);
                }
            }
        }
        if let Some(r) = record {
            fields.insert("rollout".into(), r.to_json());
        }
        let Some(mut patch) = patch_status(object, &conditions, &fields, chrono::Utc::now()) else {
            self.engine.metrics().plugin_status("unchanged");
            return Written::Unchanged;
        };
        if let Some(r) = record {
            let previous = Record::read(object).map(|p| p.digest);
            let analysis = match shown.figures {
                Some(report) => {
                    json!({&self.replica: super::rollout::figures(report, chrono::Utc::now())})
                }
                // A new rollout's figures start afresh.
                None if previous.as_ref() != Some(&r.digest) => Value::Null,
                None => Value::Object(Map::new()),
            };
            if !analysis.as_object().is_some_and(Map::is_empty) {
                patch["status"]["analysis"] = analysis;
            }
        }
        let key = stage_plugin_key(&name);
        let request = PatchRequest {
            patch_type: PatchType::Merge,
            subresource: Some("status"),
            data: patch,
            as_user: None,
        };
        match self.cluster.patch(&key, request).await {
            Ok(written) => {
                self.engine.metrics().plugin_status("written");
                // The replica whose write took tells why, once.
                if let Some(f) = shown.failure {
                    let message = format!("{}{keeps}", f.message);
                    self.send_event(&key, Some(&written), "Warning", f.reason, message)
                        .await;
                    tracing::warn!(
                        plugin = key.name,
                        reason = f.reason,
                        "StagePlugin not serving its spec: {}{keeps}",
                        f.message
                    );
                }
                Written::Took
            }
            Err(e) if matches!(e.status, Some(404 | 409)) => {
                self.engine.metrics().plugin_status("conflict");
                tracing::debug!(
                    plugin = key.name,
                    "StagePlugin status not written: {}",
                    e.message
                );
                Written::Conflict
            }
            Err(e) => {
                self.engine.metrics().plugin_status("failed");
                tracing::warn!(
                    plugin = key.name,
                    "cannot write the StagePlugin's status: {}",
                    e.message
                );
                Written::Failed
            }
        }
    }
}

/// What a StagePlugin's status is to show.
struct Shown<'a> {
    failure: Option<&'a Failure>,
    /// The version serving (or about to, for a promotion being recorded).
    serving: Option<Arc<crate::plugin::Plugin>>,
    /// The rollout of the spec's version, if it has one.
    record: Option<Record>,
    /// This replica's figures to write with it (a verdict being recorded).
    figures: Option<&'a RolloutReport>,
}

/// How a status write went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Written {
    Took,
    Unchanged,
    Conflict,
    Failed,
}

/// When the registry tags of `objects` are next resolved: after the shortest
/// `pollInterval`; never without a tag.
fn next_poll(objects: &BTreeMap<String, Arc<Value>>) -> Option<tokio::time::Instant> {
    objects
        .values()
        .filter_map(|o| match ResourcePlugin::parse(o) {
            Ok(ResourcePlugin {
                source: Source::Oci { source, .. },
                ..
            }) => source.poll,
            _ => None,
        })
        .min()
        .map(|every| tokio::time::Instant::now() + every)
}

/// Until `at`; never without it.
async fn poll(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn stage_plugin_key(name: &str) -> ObjectKey {
    let resource = stage_plugin_resource();
    ObjectKey {
        api_version: resource.api_group,
        kind: resource.kind,
        namespace: String::new(),
        name: name.to_owned(),
    }
}
