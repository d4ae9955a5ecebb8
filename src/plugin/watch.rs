//! Hot swap: watch the folders that hold the plugin files and reload on change; reload
//! the whole config on SIGHUP; decide the rollouts whose analysis time is up.
//!
//! Folders, not files, are watched: a Kubernetes ConfigMap volume replaces its files by
//! swapping a `..data` symlink, which only the folder sees, and editors save by rename.
//! Events are debounced (a burst of writes becomes one reload), and a reload only swaps
//! plugins whose content digest changed.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use notify::{RecommendedWatcher, RecursiveMode, Watcher as _};

use super::config::PluginConfig;
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
