//! The one wasmtime engine every plugin runs in: its configuration, the epoch ticker that
//! enforces per-call deadlines, and the compile cache keyed by content digest.
//!
//! Rules (from hosts that run untrusted Wasm at scale): compile once per digest, pooling
//! allocator with copy-on-write memory images so an instance costs microseconds,
//! `concurrency_support(false)` (kstage makes synchronous calls only, which keeps calls
//! cheap), epoch interruption with a single ticker thread, memory limits per store.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sha2::{Digest, Sha256};
use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use super::bindings::StagePlugin;
use super::host::State;

/// How often the epoch ticks: a call is interrupted at most one tick after its deadline.
pub const TICK: Duration = Duration::from_millis(2);

/// The largest memory any plugin may be given (`memory` in the plugin config).
pub const MAX_MEMORY: u64 = 1 << 30;

/// A sha256 digest, lower-case hex.
pub type DigestHex = String;

/// How many compiled components no plugin uses are kept anyway.
const KEEP_RECENT: usize = 4;

/// The compile cache: components by digest, and the digests in compile order.
#[derive(Default)]
struct Compiled {
    components: HashMap<DigestHex, Component>,
    recent: Vec<DigestHex>,
}

/// The shared wasmtime engine, linker and compile cache.
pub struct Runtime {
    engine: Engine,
    linker: Linker<State>,
    compiled: Mutex<Compiled>,
    stop: Arc<AtomicBool>,
    pooling: bool,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("pooling", &self.pooling)
            .finish_non_exhaustive()
    }
}

fn config(pooling: bool) -> Config {
    let mut config = Config::new();
    config
        .wasm_component_model(true)
        .concurrency_support(false)
        .epoch_interruption(true)
        .memory_init_cow(true);
    if pooling {
        let mut pool = PoolingAllocationConfig::default();
        // Sized for a few dozen plugins with a warm instance per worker each; a
        // component built by componentize-py or componentize-js holds several core
        // instances, memories and tables.
        pool.total_component_instances(256)
            .total_core_instances(2048)
            .total_memories(256)
            .total_tables(1024)
            .max_core_instances_per_component(64)
            .max_memories_per_component(16)
            .max_tables_per_component(64)
            .max_component_instance_size(1 << 20)
            .max_core_instance_size(4 << 20)
            .max_memory_size(MAX_MEMORY as usize);
        config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    }
    config
}

impl Runtime {
    /// A runtime with the pooling allocator, or the on-demand one where the pool's
    /// virtual memory cannot be reserved (a tight `ulimit -v`, say).
    pub fn new() -> Result<Arc<Self>, wasmtime::Error> {
        let (engine, pooling) = match Engine::new(&config(true)) {
            Ok(engine) => (engine, true),
            Err(e) => {
                tracing::warn!(error = %e, "plugins: pooling allocator unavailable, instantiating on demand");
                (Engine::new(&config(false))?, false)
            }
        };
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_sync(&mut linker)?;
        StagePlugin::add_to_linker::<State, wasmtime::component::HasSelf<State>>(
            &mut linker,
            |state| state,
        )?;
        let stop = Arc::new(AtomicBool::new(false));
        spawn_ticker(engine.clone(), stop.clone())?;
        Ok(Arc::new(Self {
            engine,
            linker,
            compiled: Mutex::new(Compiled::default()),
            stop,
            pooling,
        }))
    }

    /// The wasmtime engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The linker with the host interface and WASI (whose capabilities each store's
    /// context grants or denies).
    pub(crate) fn linker(&self) -> &Linker<State> {
        &self.linker
    }

    /// Compile `bytes` as a component, or take it from the cache when the same content
    /// was compiled before. Returns the content digest with the component.
    pub fn compile(&self, bytes: &[u8]) -> Result<(DigestHex, Component), String> {
        let digest = digest(bytes);
        if let Some(component) = self
            .compiled
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .components
            .get(&digest)
        {
            return Ok((digest, component.clone()));
        }
        if wasmparser_is_core_module(bytes) {
            return Err(
                "this is a core WebAssembly module, not a component: turn it into one \
                 with `wasm-tools component new` (see plugins/README.md)"
                    .to_owned(),
            );
        }
        let component = Component::new(&self.engine, bytes)
            .map_err(|e| format!("not a valid component: {e:#}"))?;
        let mut compiled = self.compiled.lock().unwrap_or_else(|e| e.into_inner());
        compiled
            .components
            .insert(digest.clone(), component.clone());
        compiled.recent.retain(|d| d != &digest);
        compiled.recent.push(digest.clone());
        Ok((digest, component))
    }

    /// Whether content with this digest is compiled and cached.
    pub fn is_cached(&self, digest: &str) -> bool {
        self.compiled
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .components
            .contains_key(digest)
    }

    /// Forget compiled components no loaded plugin uses any more, but the most recently
    /// compiled few (a plugin swapped back and forth compiles once).
    pub fn retain(&self, live: &[DigestHex]) {
        let mut compiled = self.compiled.lock().unwrap_or_else(|e| e.into_inner());
        let mut recent = std::mem::take(&mut compiled.recent);
        recent.retain(|d| compiled.components.contains_key(d));
        let keep_recent: Vec<DigestHex> = recent.iter().rev().take(KEEP_RECENT).cloned().collect();
        compiled
            .components
            .retain(|digest, _| live.contains(digest) || keep_recent.contains(digest));
        recent.retain(|d| compiled.components.contains_key(d));
        compiled.recent = recent;
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// The sha256 of `bytes`, lower-case hex.
pub fn digest(bytes: &[u8]) -> DigestHex {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A core module starts with the version word 1; a component with a layer word of 1.
fn wasmparser_is_core_module(bytes: &[u8]) -> bool {
    bytes.len() >= 8 && bytes[..4] == *b"\0asm" && bytes[4..8] == [1, 0, 0, 0]
}

fn spawn_ticker(engine: Engine, stop: Arc<AtomicBool>) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("kstage-plugin-epoch".to_owned())
        .spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(TICK);
                engine.increment_epoch();
            }
        })
        .map(drop)
}
