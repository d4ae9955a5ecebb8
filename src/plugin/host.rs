//! What a plugin's store holds and what kstage offers it: the `host` interface (log, the
//! engine's clock, seeded randomness), the memory limiter, and a WASI context that grants
//! only what the plugin's config grants (by default nothing: no files, sockets,
//! environment or output; stderr is kept in memory for the errors of failed calls).

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use chrono::SecondsFormat;
use serde::{Deserialize, Serialize};
use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::bindings::{host, types};
use super::stderr::StderrTail;
use crate::clock::Clock;
use crate::rng::Rng;

/// What a plugin may see of the host through WASI. Everything is denied by default.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Grants {
    /// The plugin's stdout goes to kstage's stdout (the container log).
    #[serde(default)]
    pub stdout: bool,
    /// The plugin's stderr goes to kstage's stderr (the container log).
    #[serde(default)]
    pub stderr: bool,
    /// Environment variables passed through, by name.
    #[serde(default)]
    pub env: Vec<String>,
    /// Host folders the plugin may read (mounted at the same path inside).
    #[serde(default)]
    pub read_dirs: Vec<PathBuf>,
    /// TCP/UDP sockets and name lookups.
    #[serde(default)]
    pub network: bool,
}

impl Grants {
    /// The WASI context of a store: what is granted, and its stderr written to `stderr`
    /// (which passes it through to kstage's stderr only when granted).
    fn context(&self, stderr: &StderrTail) -> WasiCtx {
        let mut builder = WasiCtx::builder();
        if self.stdout {
            builder.inherit_stdout();
        }
        builder.stderr(stderr.clone());
        for name in &self.env {
            if let Ok(value) = std::env::var(name) {
                builder.env(name, value);
            }
        }
        for dir in &self.read_dirs {
            let guest = dir.to_string_lossy();
            if let Err(e) = builder.preopened_dir(dir, &*guest, wasmtime_wasi::FsPerms::ReadOnly) {
                tracing::warn!(dir = %dir.display(), error = %e, "plugin: cannot grant folder");
            }
        }
        // Without the grant, wasmtime-wasi's default address check refuses every address;
        // `inherit_network` lifts it.
        builder
            .allow_tcp(self.network)
            .allow_udp(self.network)
            .allow_ip_name_lookup(self.network);
        if self.network {
            builder.inherit_network();
        }
        builder.build()
    }
}

/// What every store of one plugin shares: its name, the engine's clock, the plugin's
/// random source, its log budget.
#[derive(Debug, Clone)]
pub struct HostEnv {
    /// The plugin's configured name (log lines carry it).
    pub plugin: Arc<str>,
    /// The engine's clock (virtual in `kstage sim`).
    pub clock: Arc<dyn Clock>,
    /// Seeded in `kstage sim`, so plugin randomness replays.
    pub rng: Arc<Mutex<Rng>>,
    /// How much the plugin may still write to kstage's log.
    pub log: Arc<LogBudget>,
}

impl HostEnv {
    /// The environment of plugin `name`, with a fresh log budget.
    pub fn new(name: &str, clock: Arc<dyn Clock>, rng: Arc<Mutex<Rng>>) -> Self {
        Self {
            plugin: name.into(),
            clock,
            rng,
            log: Arc::default(),
        }
    }
}

/// The longest message a plugin's `log` call writes; the rest is cut, saying how long
/// the message was.
pub const MAX_LOG_MESSAGE: usize = 2048;
/// Log lines a plugin may write at once ...
pub const LOG_BURST: f64 = 100.0;
/// ... and per second after that (wall time, also in `kstage sim`: the budget protects
/// kstage's output, not the simulation).
pub const LOG_RATE: f64 = 20.0;

/// What one plugin may write to kstage's log (a token bucket shared by all its stores).
/// Lines over it are dropped and counted; the next line that gets through is preceded
/// by a warning saying how many were dropped.
#[derive(Debug)]
pub struct LogBudget {
    bucket: Mutex<(f64, Instant)>,
    dropped_since: AtomicU64,
    dropped: AtomicU64,
}

impl Default for LogBudget {
    fn default() -> Self {
        Self {
            bucket: Mutex::new((LOG_BURST, Instant::now())),
            dropped_since: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
        }
    }
}

impl LogBudget {
    /// Take one line from the budget: `Some(n)` when it may be written, `n` lines having
    /// been dropped since the last one written; `None` when it is dropped.
    fn take(&self) -> Option<u64> {
        let mut bucket = self.bucket.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let (tokens, last) = &mut *bucket;
        *tokens = (*tokens + now.duration_since(*last).as_secs_f64() * LOG_RATE).min(LOG_BURST);
        *last = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            Some(self.dropped_since.swap(0, Ordering::Relaxed))
        } else {
            self.dropped_since.fetch_add(1, Ordering::Relaxed);
            self.dropped.fetch_add(1, Ordering::Relaxed);
            None
        }
    }

    /// Lines dropped so far.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

/// `message` cut to [`MAX_LOG_MESSAGE`] bytes (at a character boundary), saying how long
/// it was.
fn bounded_message(message: &str) -> std::borrow::Cow<'_, str> {
    if message.len() <= MAX_LOG_MESSAGE {
        return message.into();
    }
    let mut end = MAX_LOG_MESSAGE;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}... (cut: the message was {} bytes)",
        &message[..end],
        message.len()
    )
    .into()
}

/// The memory limiter: denies growth past the plugin's limit and remembers that it did,
/// so the trap that follows is reported as out-of-memory.
#[derive(Debug)]
pub struct Limits {
    /// The most linear memory one instance may have, in bytes.
    pub memory: u64,
    /// Set when a growth past `memory` was denied during the current call.
    pub exceeded: bool,
    /// The most linear memory this instance has been given, in bytes (a linear memory
    /// never shrinks: this is its size, or the sum of its sizes with several).
    pub grown_to: u64,
}

impl ResourceLimiter for Limits {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired as u64 > self.memory {
            self.exceeded = true;
            wasmtime::bail!("memory limit of {} bytes reached", self.memory);
        }
        let granted = maximum.is_none_or(|max| desired <= max);
        if granted {
            self.grown_to += desired.saturating_sub(current) as u64;
        }
        Ok(granted)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 1_000_000 && maximum.is_none_or(|max| desired <= max))
    }
}

/// The data of one plugin store.
pub struct State {
    pub(crate) limits: Limits,
    /// The end of what the plugin wrote to stderr (see [`StderrTail`]).
    pub(crate) stderr: StderrTail,
    wasi: WasiCtx,
    table: ResourceTable,
    env: HostEnv,
}

impl State {
    /// A fresh store's data.
    pub fn new(env: HostEnv, memory: u64, grants: &Grants) -> Self {
        let stderr = StderrTail::new(grants.stderr);
        Self {
            limits: Limits {
                memory,
                exceeded: false,
                grown_to: 0,
            },
            wasi: grants.context(&stderr),
            stderr,
            table: ResourceTable::new(),
            env,
        }
    }
}

impl WasiView for State {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl types::Host for State {}

impl host::Host for State {
    fn log(&mut self, level: types::Level, message: String) {
        let plugin = &*self.env.plugin;
        let Some(dropped) = self.env.log.take() else {
            return;
        };
        if dropped > 0 {
            tracing::warn!(
                plugin,
                dropped,
                "{dropped} log lines of this plugin were dropped (more than {LOG_BURST} at once or {LOG_RATE} a second)"
            );
        }
        let message = bounded_message(&message);
        match level {
            types::Level::Trace => tracing::trace!(plugin, "{message}"),
            types::Level::Debug => tracing::debug!(plugin, "{message}"),
            types::Level::Info => tracing::info!(plugin, "{message}"),
            types::Level::Warn => tracing::warn!(plugin, "{message}"),
            types::Level::Error => tracing::error!(plugin, "{message}"),
        }
    }

    fn now(&mut self) -> String {
        self.env
            .clock
            .now()
            .to_rfc3339_opts(SecondsFormat::Nanos, true)
    }

    fn random(&mut self) -> u64 {
        self.env
            .rng
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .next_u64()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_message_is_cut_at_a_character_boundary_saying_how_long_it_was() {
        let long = "é".repeat(MAX_LOG_MESSAGE);
        let cut = bounded_message(&long);
        assert!(cut.len() < MAX_LOG_MESSAGE + 64, "{}", cut.len());
        assert!(cut.ends_with(&format!("(cut: the message was {} bytes)", long.len())));
        assert_eq!(bounded_message("short"), "short");
    }

    #[test]
    fn lines_past_the_burst_are_dropped_counted_and_reported_with_the_next_line() {
        let budget = LogBudget::default();
        let burst = LOG_BURST as usize;
        let written = (0..burst * 3).filter(|_| budget.take().is_some()).count();
        // The burst, plus what the rate refilled while the loop ran (well under one).
        assert!((burst..=burst + 1).contains(&written), "{written}");
        assert_eq!(budget.dropped(), (burst * 3 - written) as u64);
        // Once refilled, the next line carries the count of those dropped since.
        *budget.bucket.lock().expect("lock") = (1.0, Instant::now());
        assert_eq!(budget.take(), Some((burst * 3 - written) as u64));
    }
}
