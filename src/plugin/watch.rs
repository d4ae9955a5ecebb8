//! Hot swap: watch the folders that hold the plugin files and reload on change; reload
//! the whole config on SIGHUP; resolve the registry tags of `oci` plugins again and pull
//! the versions they move to; decide the rollouts whose analysis time is up.
//!
//! Folders, not files, are watched: a Kubernetes ConfigMap volume replaces its files by
//! swapping a `..data` symlink, which only the folder sees, and editors save by rename.
//! Events are debounced (a burst of writes becomes one reload), and a reload only swaps
//! plugins whose content digest changed.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use notify::{RecommendedWatcher, RecursiveMode, Watcher as _};

use super::config::{PluginConfig, PluginSpec};
use super::oci::{self, Auth, OciSource};
use super::set::{PluginSet, Reload};

/// How long the folder must be quiet before a reload.
pub const DEBOUNCE: Duration = Duration::from_millis(100);

/// A running folder watcher; dropping it stops watching.
pub struct Watcher {
    _watcher: RecommendedWatcher,
}

impl std::fmt::Debug for Watcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watcher").finish_non_exhaustive()
    }
}

/// Watch the folders of `set`'s plugins; after each burst of changes, reload and hand the
/// report to `on_reload` (on the watcher's own thread).
pub fn watch(
    set: Arc<PluginSet>,
    on_reload: impl Fn(&Reload) + Send + 'static,
) -> Result<Watcher, notify::Error> {
    let (events, changes) = mpsc::channel::<()>();
    let mut watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        if event.is_ok_and(|e| !e.kind.is_access()) {
            let _ = events.send(());
        }
    })?;
    for folder in set.folders() {
        watcher.watch(&folder, RecursiveMode::NonRecursive)?;
    }
    std::thread::Builder::new()
        .name("kstage-plugin-watch".to_owned())
        .spawn(move || {
            while changes.recv().is_ok() {
                // Debounce: wait until the folder has been quiet for a moment.
                while changes.recv_timeout(DEBOUNCE).is_ok() {}
                let report = set.reload();
                if !report.swapped.is_empty() || !report.rejected.is_empty() {
                    on_reload(&report);
                }
            }
        })
        .map_err(|e| notify::Error::generic(&e.to_string()))?;
    Ok(Watcher { _watcher: watcher })
}

/// On every SIGHUP, read `config` again and reconfigure `set` (a config that does not
/// parse, or names a plugin that does not load, is rejected and logged; the running set
/// stays). Runs until the runtime shuts down.
pub fn reload_on_sighup(
    set: Arc<PluginSet>,
    config: PathBuf,
    on_reload: impl Fn(&Reload) + Send + 'static,
) -> std::io::Result<tokio::task::JoinHandle<()>> {
    let mut hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
    Ok(tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            tracing::info!(config = %config.display(), "SIGHUP: reloading plugins");
            let parsed = match PluginConfig::read(&config) {
                Ok(parsed) => parsed,
                Err(e) => {
                    tracing::error!(error = %e, "SIGHUP: config rejected; plugins unchanged");
                    continue;
                }
            };
            let set = set.clone();
            let result = tokio::task::spawn_blocking(move || set.reconfigure(parsed)).await;
            match result {
                Ok(Ok(report)) => on_reload(&report),
                Ok(Err(errors)) => {
                    for e in errors {
                        tracing::error!(error = %e, "SIGHUP: plugin rejected; plugins unchanged");
                    }
                }
                Err(e) => tracing::error!(error = %e, "SIGHUP: reload failed"),
            }
        }
    }))
}

/// How often [`settle_rollouts`] looks at the rollouts by default.
pub const ROLLOUT_CHECK: Duration = Duration::from_secs(5);

/// Every `every`, decide the rollouts whose analysis time is up and fold the verdicts
/// reached (a version promoted on time even when no call comes to judge it); a report
/// that changed something goes to `on_reload`. Runs until the runtime shuts down.
pub fn settle_rollouts(
    set: Arc<PluginSet>,
    every: Duration,
    on_reload: impl Fn(&Reload) + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if set.rollouts().is_empty() {
                continue;
            }
            let set = set.clone();
            match tokio::task::spawn_blocking(move || set.settle_rollouts()).await {
                Ok(report) if report != Reload::default() => on_reload(&report),
                Ok(_) => {}
                Err(e) => tracing::error!(error = %e, "settling plugin rollouts failed"),
            }
        }
    })
}

/// Resolve the tag of every `--config` plugin pulled from a registry by tag again, each
/// every `pollInterval`; a new digest is pulled into `cache` and swapped in (or analysed,
/// per its `rollout`) as a changed file is, the report going to `on_reload`. A registry
/// that fails (unreachable, credentials refused, not a Wasm artifact, a digest other than
/// the pinned one) leaves the serving version; it is logged once, and again only when
/// the failure changes or ends. `polls` counts the rounds done. Runs until the runtime
/// shuts down.
pub fn poll_registries(
    set: Arc<PluginSet>,
    cache: PathBuf,
    on_reload: impl Fn(&Reload) + Send + 'static,
) -> (
    tokio::task::JoinHandle<()>,
    tokio::sync::watch::Receiver<u64>,
) {
    let (polls, rounds) = tokio::sync::watch::channel(0u64);
    let task = tokio::spawn(async move {
        let mut due: HashMap<String, tokio::time::Instant> = HashMap::new();
        let mut failing: HashMap<String, String> = HashMap::new();
        loop {
            let now = tokio::time::Instant::now();
            let tagged: Vec<(PluginSpec, OciSource, Duration)> = set
                .file_plugins()
                .into_iter()
                .filter_map(|spec| {
                    let source = spec.oci.clone()?;
                    let every = source.poll?;
                    Some((spec, source, every))
                })
                .collect();
            due.retain(|name, _| tagged.iter().any(|(s, _, _)| s.name == *name));
            let next = tagged
                .iter()
                .map(|(spec, _, every)| *due.entry(spec.name.clone()).or_insert(now + *every))
                .min()
                // SIGHUP may bring a tagged plugin: looked for again this often.
                .unwrap_or(now + oci::DEFAULT_POLL);
            tokio::time::sleep_until(next).await;
            let now = tokio::time::Instant::now();
            for (spec, source, every) in &tagged {
                if due.get(&spec.name).is_some_and(|at| *at <= now) {
                    let outcome = poll_one(&set, spec, source, &cache).await;
                    tell(&spec.name, outcome, &mut failing, &on_reload);
                    due.insert(spec.name.clone(), tokio::time::Instant::now() + *every);
                }
            }
            polls.send_modify(|n| *n += 1);
        }
    });
    (task, rounds)
}

/// Resolve `spec`'s tag and take the version it names, if new.
async fn poll_one(
    set: &Arc<PluginSet>,
    spec: &PluginSpec,
    source: &OciSource,
    cache: &Path,
) -> Result<Reload, String> {
    let auth = Auth::docker_config(&source.registry())?;
    let pulled = oci::pull(source, &auth, cache)
        .await
        .map_err(|e| e.to_string())?;
    if spec.sha256.as_deref() == Some(pulled.sha256.as_str()) {
        return Ok(Reload::default());
    }
    tracing::info!(plugin = %spec.name, reference = %source.reference, manifest = %pulled.manifest_digest, sha256 = %pulled.sha256, "plugin tag moved");
    let (set, name) = (set.clone(), spec.name.clone());
    tokio::task::spawn_blocking(move || set.repoint(&name, &pulled.path, &pulled.sha256))
        .await
        .map_err(|e| e.to_string())?
        .map_err(|errors| {
            let list: Vec<String> = errors.iter().map(ToString::to_string).collect();
            list.join("; ")
        })
}

/// Log a poll's outcome for plugin `name`: a failure once (until it changes or ends).
fn tell(
    name: &str,
    outcome: Result<Reload, String>,
    failing: &mut HashMap<String, String>,
    on_reload: &impl Fn(&Reload),
) {
    match outcome {
        Ok(report) => {
            if failing.remove(name).is_some() {
                tracing::info!(plugin = %name, "plugin registry answers again");
            }
            if report != Reload::default() {
                on_reload(&report);
            }
        }
        Err(why) => {
            if failing.get(name) != Some(&why) {
                tracing::warn!(plugin = %name, "plugin registry poll failed, the serving version stays (told once): {why}");
                failing.insert(name.to_owned(), why);
            }
        }
    }
}
