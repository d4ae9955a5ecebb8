//! The one wasmtime engine every plugin runs in: its configuration, the epoch ticker that
//! enforces per-call deadlines, and the compile caches: in memory by content digest, and
//! optionally on disk across processes.
//!
//! Rules (from hosts that run untrusted Wasm at scale): compile once per digest, pooling
//! allocator with copy-on-write memory images so an instance costs microseconds,
//! `concurrency_support(false)` (kstage makes synchronous calls only, which keeps calls
//! cheap), epoch interruption with a single ticker thread, memory limits per store.
//!
//! The disk cache is wasmtime's own (`Config::cache`): an entry is named by a sha256 of
//! the component's bytes, the wasmtime version and every engine setting that affects the
//! code (target, compiler flags, tunables, wasm features), so a kstage built on another
//! wasmtime, or an engine configured otherwise, never reads it. An entry that cannot be
//! decompressed or that wasmtime does not accept as code of this engine is compiled
//! again and rewritten. Writes are atomic (a temporary file renamed); wasmtime's cleanup
//! keeps the folder under its size limits.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sha2::{Digest, Sha256};
use wasmtime::component::{Component, Linker};
use wasmtime::{
    Cache, CacheConfig, Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig,
};

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
    disk: Option<Cache>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("pooling", &self.pooling)
            .field("disk_cache", &self.disk.as_ref().map(Cache::directory))
            .finish_non_exhaustive()
    }
}

/// The folder of kstage's caches: `$KSTAGE_CACHE`, else `$XDG_CACHE_HOME/kstage`, else
/// `$HOME/.cache/kstage`; `None` when none of them is set.
pub fn cache_root() -> Option<PathBuf> {
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
    if let Some(dir) = var("KSTAGE_CACHE") {
        return Some(dir.into());
    }
    if let Some(dir) = var("XDG_CACHE_HOME") {
        return Some(PathBuf::from(dir).join("kstage"));
    }
    var("HOME").map(|home| PathBuf::from(home).join(".cache/kstage"))
}

/// Where compiled components are kept: `compiled` in [`cache_root`].
pub fn compile_cache_dir() -> Option<PathBuf> {
    cache_root().map(|root| root.join("compiled"))
}

/// Counts of the disk cache since the runtime started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskCacheStats {
    /// Components read from the disk cache instead of compiled.
    pub hits: usize,
    /// Components compiled (and written to the cache).
    pub misses: usize,
}

/// wasmtime's compilation cache in `dir` (created if missing; made absolute, as wasmtime
/// requires).
fn disk_cache(dir: &Path) -> Result<Cache, String> {
    let dir = std::path::absolute(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut config = CacheConfig::new();
    config
        .with_directory(dir)
        // Entries are written once, zstd-compressed at the default level; wasmtime's
        // background recompression of often-used entries (at level 20, minutes of CPU for
        // an interpreter's component) is not worth it for files this size.
        .with_optimized_compression_usage_counter_threshold(u64::MAX);
    Cache::new(config).map_err(|e| format!("{e:#}"))
}

fn config(pooling: bool, disk: Option<&Cache>) -> Config {
    let mut config = Config::new();
    config
        .wasm_component_model(true)
        .concurrency_support(false)
        .epoch_interruption(true)
        .memory_init_cow(true)
        .cache(disk.cloned());
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
    /// virtual memory cannot be reserved (a tight `ulimit -v`, say). Components are
    /// compiled once per process (no disk cache).
    pub fn new() -> Result<Arc<Self>, wasmtime::Error> {
        Self::with_disk_cache(None)
    }

    /// As [`Runtime::new`], keeping compiled components in `dir` across processes too
    /// (see the module docs). A folder that cannot be used is logged and done without.
    pub fn with_disk_cache(dir: Option<&Path>) -> Result<Arc<Self>, wasmtime::Error> {
        let disk = dir.and_then(|dir| {
            disk_cache(dir)
                .inspect_err(|e| {
                    tracing::warn!(error = %e, "plugins: compile cache unavailable, compiling every time");
                })
                .ok()
        });
        let (engine, pooling) = match Engine::new(&config(true, disk.as_ref())) {
            Ok(engine) => (engine, true),
            Err(e) => {
                tracing::warn!(error = %e, "plugins: pooling allocator unavailable, instantiating on demand");
                (Engine::new(&config(false, disk.as_ref()))?, false)
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
            disk,
        }))
    }

    /// The disk cache's folder and counts, when there is one.
    pub fn disk_cache(&self) -> Option<(&Path, DiskCacheStats)> {
        self.disk.as_ref().map(|cache| {
            let stats = DiskCacheStats {
                hits: cache.cache_hits(),
                misses: cache.cache_misses(),
            };
            (cache.directory().as_path(), stats)
        })
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The entries wasmtime's cache holds under `dir` (its statistics files aside).
    fn entries(dir: &Path) -> Vec<PathBuf> {
        let mut found = Vec::new();
        let mut stack = vec![dir.to_owned()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    stack.push(path);
                } else if path.extension().is_none() {
                    found.push(path);
                }
            }
        }
        found
    }

    fn stats(runtime: &Runtime) -> DiskCacheStats {
        runtime.disk_cache().expect("a disk cache").1
    }

    #[test]
    fn a_component_is_compiled_once_across_runtimes_and_a_bad_entry_is_rewritten() {
        let dir = std::env::temp_dir().join(format!("kstage-compile-cache-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let bytes = wat::parse_str(r#"(component (core module (func (export "f"))))"#)
            .expect("the component parses");
        let first = Runtime::with_disk_cache(Some(&dir)).expect("runtime");
        first.compile(&bytes).expect("compiles");
        assert_eq!(stats(&first), DiskCacheStats { hits: 0, misses: 1 });
        let written = entries(&dir);
        assert_eq!(written.len(), 1, "{written:?}");
        // Another process (another runtime) reads it instead of compiling.
        let second = Runtime::with_disk_cache(Some(&dir)).expect("runtime");
        second.compile(&bytes).expect("compiles");
        assert_eq!(stats(&second), DiskCacheStats { hits: 1, misses: 0 });
        // A corrupt entry is not trusted: compiled again and rewritten.
        std::fs::write(&written[0], b"not compiled code").expect("corrupt");
        let third = Runtime::with_disk_cache(Some(&dir)).expect("runtime");
        third.compile(&bytes).expect("compiles");
        assert_eq!(stats(&third), DiskCacheStats { hits: 0, misses: 1 });
        assert_ne!(
            std::fs::read(&written[0]).expect("entry"),
            b"not compiled code"
        );
        let fourth = Runtime::with_disk_cache(Some(&dir)).expect("runtime");
        fourth.compile(&bytes).expect("compiles");
        assert_eq!(stats(&fourth), DiskCacheStats { hits: 1, misses: 0 });
        // Without a folder there is no disk cache.
        assert!(Runtime::new().expect("runtime").disk_cache().is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
