//! `kstage sim`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use chrono::{DateTime, TimeDelta, Utc};

use super::{Output, StagePaths, parse_duration};
use crate::clock::{Clock, TokioClock};
use crate::cluster::faults::FaultSpec;
use crate::sim::Config;
use crate::template::{Renderer, StageEnv};

/// Arguments of `kstage sim`.
#[derive(Debug, clap::Args)]
pub struct SimArgs {
    #[command(flatten)]
    paths: StagePaths,
    /// Object files or folders (nodes, pods, any kind), created at time zero in order.
    #[arg(long = "objects", short = 'f', required = true, num_args = 1..)]
    objects: Vec<PathBuf>,
    /// Seed of the random choices (weights, jitter, and sprig's `uuidv4`, `randAlpha`,
    /// keys ... in templates): same seed, same output.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Environment variables sprig's `env` and `expandenv` may read in Stage templates
    /// (`NAME,...`); none by default, so a Stage cannot copy the daemon's secrets into an
    /// object.
    #[arg(long, value_delimiter = ',')]
    template_env: Vec<String>,
    /// Stop at this virtual time (Go duration: `90s`, `1h`); stages that repeat forever,
    /// like node heartbeats, need it.
    #[arg(long, value_parser = parse_duration, default_value = "24h")]
    until: TimeDelta,
    /// Delete every input object, as a user would (gracefully), at this virtual time.
    #[arg(long, value_parser = parse_duration)]
    delete_after: Option<TimeDelta>,
    /// Virtual time of the start (RFC 3339).
    #[arg(long, value_parser = parse_start, default_value = "2025-01-01T00:00:00Z")]
    start: DateTime<Utc>,
    /// Fail after this many Stage transitions (guards against Stages that loop without
    /// time passing).
    #[arg(long, default_value_t = 10_000_000)]
    max_transitions: u64,
    /// Create each input object this many times, named `NAME-0` .. `NAME-<N-1>` (for
    /// load runs: `--copies 10000`).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    copies: u64,
    /// Inject faults into the in-memory cluster's answers, e.g.
    /// `*:503=0.05,patch:409=0.02,create:429@2s=0.1` (VERB:FAULT=RATE, see the README).
    #[arg(long, default_value = "")]
    faults: FaultSpec,
    /// Engine workers. With more than one, runs are no longer reproducible byte for byte.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=256))]
    workers: u64,
    /// How fast one object may play the same Stage again (`BURST/WINDOW` of virtual time,
    /// or `off`), as `kstage run --loop-guard`: a looping Stage is slowed down, so virtual
    /// time moves on to `--until`.
    #[arg(long, default_value = "20/1s", value_parser = super::run::parse_loop_guard)]
    loop_guard: crate::engine::LoopGuard,
    /// A daemon config file whose `plugins` and `bindings` select, render and classify
    /// (plugins run offline, on the virtual clock and seeded randomness).
    #[arg(long)]
    config: Option<PathBuf>,
    /// Take a new version of a plugin of `--config` at a virtual time: `AT:NAME=FILE`
    /// (`10m:retry=retry-v2.wasm`); repeatable. Under the plugin's `rollout` the new
    /// version is analysed on the run's calls (drawn from `--seed`), then promoted or
    /// rolled back; the report lists what happened when.
    #[arg(long = "swap", value_parser = parse_swap, requires = "config")]
    swaps: Vec<SwapArg>,
    /// What to print: the timeline and final objects as text, YAML or JSON, or only the
    /// summary line.
    #[arg(long, short = 'o', value_enum, default_value_t = SimOutput::Text)]
    output: SimOutput,
}

/// Output of `kstage sim`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum SimOutput {
    Text,
    Yaml,
    Json,
    Summary,
}

/// A `--swap` as given.
#[derive(Debug, Clone)]
struct SwapArg {
    at: TimeDelta,
    plugin: String,
    file: PathBuf,
}

fn parse_swap(s: &str) -> Result<SwapArg, String> {
    let usage = || format!("{s:?} is not AT:NAME=FILE (for example 10m:retry=retry-v2.wasm)");
    let (at, rest) = s.split_once(':').ok_or_else(usage)?;
    let (plugin, file) = rest.split_once('=').ok_or_else(usage)?;
    if plugin.is_empty() || file.is_empty() {
        return Err(usage());
    }
    Ok(SwapArg {
        at: parse_duration(at).map_err(|e| format!("{s:?}: {e}"))?,
        plugin: plugin.to_owned(),
        file: PathBuf::from(file),
    })
}

fn parse_start(s: &str) -> Result<DateTime<Utc>, String> {
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| format!("not an RFC 3339 time: {e}"))
}

pub(super) fn run(args: SimArgs) -> anyhow::Result<ExitCode> {
    let SimArgs {
        paths,
        objects,
        seed,
        template_env,
        until,
        delete_after,
        start,
        max_transitions,
        copies,
        faults,
        workers,
        loop_guard,
        config: plugin_config,
        swaps,
        output,
    } = args;
    let plugin_config = plugin_config
        .map(|path| crate::plugin::config::PluginConfig::read(&path))
        .transpose()?;
    let swaps = swaps
        .into_iter()
        .map(|swap| {
            let known = plugin_config
                .as_ref()
                .is_some_and(|c| c.plugins.iter().any(|p| p.name == swap.plugin));
            if !known {
                anyhow::bail!("--swap: no plugin {:?} in --config", swap.plugin);
            }
            let bytes = std::fs::read(&swap.file)
                .map_err(|e| anyhow::anyhow!("--swap: cannot read {}: {e}", swap.file.display()))?;
            Ok(crate::sim::Swap {
                at: swap.at.to_std().unwrap_or_default(),
                plugin: swap.plugin,
                bytes: Arc::new(bytes),
            })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    // Virtual time: tokio's paused clock on one thread, so hours pass in milliseconds
    // and the order of everything is fixed by the inputs and the seed.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()?;
    let objects = replicate(super::read_objects(&objects)?, copies);
    let n_objects = objects.len();
    let report = runtime.block_on(async {
        let clock: Arc<dyn Clock> = Arc::new(TokioClock::new(start));
        let env = Arc::new(
            StageEnv::new(clock.clone(), start, env!("CARGO_PKG_VERSION"))
                .with_seed(seed)
                .with_env_vars(template_env),
        );
        let renderer = Renderer::new(env.clone());
        let stages = super::load_stages(&paths.stages, &renderer)?;
        let plugins = match plugin_config {
            Some(c) => {
                let (set, startup) = super::plugin::load_set(c, clock.clone(), Some(seed))?;
                // Wall time, so stderr (stdout stays reproducible).
                eprintln!("kstage sim: {startup}");
                Some(set)
            }
            None => None,
        };
        let loaded = plugins.clone();
        let deciders = plugins
            .as_ref()
            .map_or_else(crate::decide::Deciders::default, |set| set.deciders());
        let config = Config {
            seed,
            start,
            until: until.to_std().unwrap_or_default(),
            delete_after: delete_after.and_then(|d| d.to_std().ok()),
            max_transitions,
            faults,
            workers: workers as usize,
            timeline: output != SimOutput::Summary,
            deciders,
            observer: Some(env.clone()),
            loop_guard,
            plugins,
            swaps,
        };
        let report = crate::sim::run(stages, clock, objects, config).await?;
        anyhow::Ok((report, loaded))
    })?;
    let (report, loaded) = report;
    let wall = report.wall.as_secs_f64();
    match output {
        SimOutput::Text => {
            let mut text = report.timeline_text();
            if !report.plugins.is_empty() {
                text.push_str("\n# plugins\n");
                text.push_str(&report.plugins_text());
            }
            text.push_str("\n# final objects\n");
            text.push_str(&crate::yaml::to_string(&serde_json::Value::Array(
                report.objects.clone(),
            )));
            if !text.ends_with('\n') {
                text.push('\n');
            }
            super::print(&text)?;
        }
        SimOutput::Yaml => super::print_value(&report.to_value(), Output::Yaml)?,
        SimOutput::Json => super::print_value(&report.to_value(), Output::Json)?,
        SimOutput::Summary => {}
    }
    let s = report.stats;
    // Wall-clock figures vary run to run, so they go to stderr and stdout stays
    // byte-for-byte reproducible.
    eprintln!(
        "kstage sim: {n_objects} objects, {} transitions, {} events, {} writes, {} no-ops, {} retries, {} faults, {} errors, virtual time {}; {:.3} s wall, {:.0} transitions/s",
        s.transitions,
        s.events,
        s.writes,
        s.noops,
        s.retries,
        s.faults,
        s.errors,
        crate::sim::clock_time(report.end),
        wall,
        s.transitions as f64 / wall.max(1e-9),
    );
    if let Some(set) = loaded {
        eprint!("{}", plugin_calls(&set));
    }
    if s.slowed > 0 {
        eprintln!(
            "kstage sim: {} object{} played Stages in a loop (back to back with no delay, each output matching a Stage again at once) and {} slowed down by the loop guard: see the warnings above; the run went on to --until",
            s.slowed,
            if s.slowed == 1 { "" } else { "s" },
            if s.slowed == 1 { "was" } else { "were" },
        );
    }
    Ok(if s.errors == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// One stderr line per plugin capability called in the run: calls, failures, and the
/// mean wall time per call (wall time: stdout stays reproducible).
fn plugin_calls(set: &crate::plugin::PluginSet) -> String {
    use std::sync::atomic::Ordering;
    let mut out = String::new();
    for plugin in set.plugins() {
        for capability in plugin.capabilities() {
            let stats = plugin.stats(*capability);
            let calls = stats.calls.load(Ordering::Relaxed);
            if calls == 0 {
                continue;
            }
            let micros = stats.micros.load(Ordering::Relaxed);
            out.push_str(&format!(
                "kstage sim: plugin {} {capability}: {calls} calls, {} failed, {:.1} µs per call\n",
                plugin.info().name,
                stats.failures.load(Ordering::Relaxed),
                micros as f64 / calls as f64,
            ));
        }
    }
    out
}

/// Each object `copies` times, renamed `NAME-i` (unchanged when `copies` is 1).
fn replicate(objects: Vec<serde_json::Value>, copies: u64) -> Vec<serde_json::Value> {
    if copies <= 1 {
        return objects;
    }
    let mut out = Vec::with_capacity(objects.len() * copies as usize);
    for object in &objects {
        let name = object
            .pointer("/metadata/name")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("object")
            .to_owned();
        for i in 0..copies {
            let mut copy = object.clone();
            if let Some(meta) = copy.get_mut("metadata").and_then(|m| m.as_object_mut()) {
                meta.insert("name".into(), serde_json::json!(format!("{name}-{i}")));
            }
            out.push(copy);
        }
    }
    out
}
