//! `kstage plugin check | call | test | bench | new | push`: a plugin author's tools, one file per
//! command, and what they share: loading a component standalone, the runtime with its
//! compile cache.

mod call;
mod check;
mod junit;
mod new;
mod push;
mod test;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use serde_json::Value;

use crate::clock::SystemClock;
use crate::plugin::{HostEnv, Plugin, Runtime, Settings};
use crate::rng::Rng;

/// `kstage plugin ...`.
#[derive(Debug, clap::Subcommand)]
pub enum PluginCommand {
    /// Load a plugin and report its capabilities, metadata, imports and problems.
    Check(check::CheckArgs),
    /// Call one capability of a plugin with an input file and print the answer.
    Call(call::CallArgs),
    /// Run test cases (calls with the answers expected) against a plugin.
    Test(test::TestArgs),
    /// Time each capability of a plugin beside kstage's built-in implementation.
    Bench(BenchArgs),
    /// Write a new plugin project (source, build script, test cases, a `kstage sim`
    /// setup) in Rust, C, Zig, JavaScript, Python or Go.
    New(new::NewArgs),
    /// Push a component to an OCI registry (`oci://REGISTRY/REPOSITORY:TAG`) and print
    /// the digests to pin it by.
    Push(push::PushArgs),
}

/// Arguments of `kstage plugin bench`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// The plugin component (`.wasm`).
    file: PathBuf,
    /// Calls per capability (after 100 warm-up calls).
    #[arg(long, short = 'n', default_value_t = 10_000)]
    calls: u32,
}

/// What `check`, `call` and `test` share: the plugin's stderr and the call deadline.
#[derive(Debug, Clone, clap::Args)]
pub struct GuestArgs {
    /// Let the plugin's stderr through to the terminal (by default it is kept, and its
    /// last lines are shown when a call traps).
    #[arg(long)]
    stderr: bool,
    /// Longest a call may run.
    #[arg(long, default_value = "1s", value_parser = super::parse_duration)]
    timeout: chrono::TimeDelta,
}

impl GuestArgs {
    fn settings(&self) -> Settings {
        let mut settings = Settings {
            timeout: self.timeout.to_std().unwrap_or(Duration::from_secs(1)),
            ..Settings::default()
        };
        settings.grants.stderr = self.stderr;
        settings
    }
}

pub(super) fn run(command: PluginCommand) -> anyhow::Result<ExitCode> {
    match command {
        PluginCommand::Check(args) => check::run(args),
        PluginCommand::Call(args) => call::run(args),
        PluginCommand::Test(args) => test::run(args),
        PluginCommand::New(args) => new::run(args),
        PluginCommand::Push(args) => push::run(args),
        PluginCommand::Bench(args) => {
            let plugin = load(&runtime()?, &args.file, Settings::default())?;
            super::bench_plugin::run(&plugin, args.calls)
        }
    }
}

/// Whether compiled components are kept on disk (`--no-compile-cache` turns it off).
static COMPILE_CACHE: AtomicBool = AtomicBool::new(true);

/// Use the disk compile cache, or not, for every runtime this process starts.
pub(super) fn use_compile_cache(on: bool) {
    COMPILE_CACHE.store(on, Ordering::Relaxed);
}

/// The plugin runtime, with the disk compile cache unless it is turned off.
pub(super) fn runtime() -> anyhow::Result<Arc<Runtime>> {
    let dir = COMPILE_CACHE
        .load(Ordering::Relaxed)
        .then(crate::plugin::runtime::compile_cache_dir)
        .flatten();
    Runtime::with_disk_cache(dir.as_deref())
        .map_err(|e| anyhow::anyhow!("starting wasmtime: {e:#}"))
}

/// Load `file` with `settings`, standalone (wall clock, entropy-seeded randomness).
pub(super) fn load(
    runtime: &Arc<Runtime>,
    file: &Path,
    settings: Settings,
) -> anyhow::Result<Arc<Plugin>> {
    let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
    let name = file
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "plugin".to_owned());
    let env = HostEnv::new(
        &name,
        Arc::new(SystemClock),
        Arc::new(Mutex::new(Rng::from_entropy())),
    );
    Ok(Plugin::load(runtime, &name, file, &bytes, settings, env)?)
}

/// Load every plugin of a config (all must load and validate), naming each failure. The
/// text says how long that took and where the compiled code came from
/// (`2 plugins ready in 0.31 s, read from the cache in DIR`).
pub(super) fn load_set(
    config: crate::plugin::config::PluginConfig,
    clock: Arc<dyn crate::clock::Clock>,
    seed: Option<u64>,
) -> anyhow::Result<(Arc<crate::plugin::PluginSet>, String)> {
    let began = std::time::Instant::now();
    let runtime = runtime()?;
    let count = config.plugins.len();
    let set =
        crate::plugin::PluginSet::load(runtime.clone(), config, clock, seed).map_err(|errors| {
            let list: Vec<String> = errors.iter().map(|e| format!("  {e}")).collect();
            anyhow::anyhow!("cannot load the plugins:\n{}", list.join("\n"))
        })?;
    let startup = format!(
        "{count} plugin{} ready in {:.2} s, {}",
        if count == 1 { "" } else { "s" },
        began.elapsed().as_secs_f64(),
        compile_cache(&runtime)
    );
    Ok((set, startup))
}

/// Where the components' code came from: the disk cache, compiled now, or compiled with
/// no disk cache.
fn compile_cache(runtime: &Runtime) -> String {
    match runtime.disk_cache() {
        Some((dir, stats)) if stats.misses > 0 && stats.hits > 0 => format!(
            "{} read from the cache in {} and {} compiled into it",
            stats.hits,
            dir.display(),
            stats.misses
        ),
        Some((dir, stats)) if stats.hits > 0 => format!("read from the cache in {}", dir.display()),
        Some((dir, stats)) if stats.misses > 0 => {
            format!("compiled, and cached in {}", dir.display())
        }
        Some((dir, _)) => format!("compiled (could not be cached in {})", dir.display()),
        None => "compiled (no compile cache)".to_owned(),
    }
}

/// A YAML or JSON file as JSON.
fn read_document(path: &Path) -> anyhow::Result<Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    crate::yaml::to_json(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}
