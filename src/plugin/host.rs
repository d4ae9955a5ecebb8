//! What a plugin's store holds and what kstage offers it: the `host` interface (log, the
//! engine's clock, seeded randomness), the memory limiter, and a WASI context that grants
//! only what the plugin's config grants (by default nothing: no files, sockets,
//! environment or output).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use chrono::SecondsFormat;
use serde::{Deserialize, Serialize};
use wasmtime::ResourceLimiter;
use wasmtime::component::ResourceTable;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use super::bindings::{host, types};
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
    fn context(&self) -> WasiCtx {
        let mut builder = WasiCtx::builder();
        if self.stdout {
            builder.inherit_stdout();
        }
        if self.stderr {
            builder.inherit_stderr();
        }
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
/// random source.
#[derive(Debug, Clone)]
pub struct HostEnv {
    /// The plugin's configured name (log lines carry it).
    pub plugin: Arc<str>,
    /// The engine's clock (virtual in `kstage sim`).
    pub clock: Arc<dyn Clock>,
    /// Seeded in `kstage sim`, so plugin randomness replays.
    pub rng: Arc<Mutex<Rng>>,
}

/// The memory limiter: denies growth past the plugin's limit and remembers that it did,
/// so the trap that follows is reported as out-of-memory.
#[derive(Debug)]
pub struct Limits {
    /// The most linear memory one instance may have, in bytes.
    pub memory: u64,
    /// Set when a growth past `memory` was denied during the current call.
    pub exceeded: bool,
}

impl ResourceLimiter for Limits {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired as u64 > self.memory {
            self.exceeded = true;
            wasmtime::bail!("memory limit of {} bytes reached", self.memory);
        }
        Ok(maximum.is_none_or(|max| desired <= max))
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
    wasi: WasiCtx,
    table: ResourceTable,
    env: HostEnv,
}

impl State {
    /// A fresh store's data.
    pub fn new(env: HostEnv, memory: u64, grants: &Grants) -> Self {
        Self {
            limits: Limits {
                memory,
                exceeded: false,
            },
            wasi: grants.context(),
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
