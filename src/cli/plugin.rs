//! `kstage plugin check | call | bench`: a plugin author's tools.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use serde_json::{Value, json};

use super::Output;
use crate::clock::SystemClock;
use crate::plugin::{Capability, HostEnv, Plugin, Runtime, Settings};
use crate::rng::Rng;

/// `kstage plugin ...`.
#[derive(Debug, clap::Subcommand)]
pub enum PluginCommand {
    /// Load a plugin and report its capabilities, metadata, imports and problems.
    Check(CheckArgs),
    /// Call one capability of a plugin with an input file and print the answer.
    Call(CallArgs),
    /// Time each capability of a plugin beside kstage's built-in implementation.
    Bench(BenchArgs),
}

/// Arguments of `kstage plugin check`.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// The plugin component (`.wasm`).
    file: PathBuf,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value = "text")]
    output: Output,
}

/// Arguments of `kstage plugin call`.
#[derive(Debug, clap::Args)]
pub struct CallArgs {
    /// The plugin component (`.wasm`).
    file: PathBuf,
    /// `selector`, `renderer` or `classifier`.
    capability: Capability,
    /// The call's input, YAML or JSON: for `selector` `{object, candidates: [{name,
    /// weight, delayMs}]}`; for `renderer` `{stage, template, object}`; for `classifier`
    /// `{kind, status, reason, message, retryAfterMs, stage, step, attempt, object}`.
    /// A test case file (`{capability, input, expect}`, as in the example plugins'
    /// `cases/`) gives its `input`.
    #[arg(long, short = 'i')]
    input: PathBuf,
    /// Longest the call may run.
    #[arg(long, default_value = "1s", value_parser = super::parse_duration)]
    timeout: chrono::TimeDelta,
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

pub(super) fn run(command: PluginCommand) -> anyhow::Result<ExitCode> {
    match command {
        PluginCommand::Check(args) => check(args),
        PluginCommand::Call(args) => call(args),
        PluginCommand::Bench(args) => {
            let runtime =
                Runtime::new().map_err(|e| anyhow::anyhow!("starting wasmtime: {e:#}"))?;
            let plugin = load(&runtime, &args.file, Settings::default())?;
            super::bench_plugin::run(&plugin, args.calls)
        }
    }
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

/// Load every plugin of a config (all must load and validate), naming each failure.
pub(super) fn load_set(
    config: crate::plugin::config::PluginConfig,
    clock: Arc<dyn crate::clock::Clock>,
    seed: Option<u64>,
) -> anyhow::Result<Arc<crate::plugin::PluginSet>> {
    let runtime = Runtime::new().map_err(|e| anyhow::anyhow!("starting wasmtime: {e:#}"))?;
    crate::plugin::PluginSet::load(runtime, config, clock, seed).map_err(|errors| {
        let list: Vec<String> = errors.iter().map(|e| format!("  {e}")).collect();
        anyhow::anyhow!("cannot load the plugins:\n{}", list.join("\n"))
    })
}

/// What each family of WASI imports would need granted.
fn wasi_needs(imports: &[String]) -> Vec<String> {
    let mut needs = Vec::new();
    let mut add = |what: &str| {
        if !needs.iter().any(|n| n == what) {
            needs.push(what.to_owned());
        }
    };
    for import in imports {
        let Some(rest) = import.strip_prefix("wasi:") else {
            continue;
        };
        if rest.starts_with("filesystem/") {
            add("files (grant readDirs; denied by default: the plugin sees no folder)");
        } else if rest.starts_with("sockets/") {
            add("network (grant network; denied by default)");
        } else if rest.starts_with("cli/environment") {
            add("environment (grant env; empty by default)");
        } else if rest.starts_with("cli/stdout") || rest.starts_with("cli/stderr") {
            add("output (grant stdout/stderr; discarded by default)");
        }
    }
    needs
}

fn check(args: CheckArgs) -> anyhow::Result<ExitCode> {
    let runtime = Runtime::new().map_err(|e| anyhow::anyhow!("starting wasmtime: {e:#}"))?;
    let file = args.file.display().to_string();
    let (report, ok) = match load(&runtime, &args.file, Settings::default()) {
        Err(e) => (json!({"file": file, "problems": [format!("{e:#}")]}), false),
        Ok(plugin) => {
            let problems: Vec<String> = plugin.validate().err().into_iter().collect();
            let ok = problems.is_empty();
            let report = json!({
                "file": file,
                "sha256": plugin.digest(),
                "name": plugin.info().name,
                "version": plugin.info().version,
                "interfaceVersion": plugin.info().interface_version,
                "capabilities": plugin.capabilities(),
                "imports": plugin.imports(),
                "wasi": wasi_needs(plugin.imports()),
                "problems": problems,
            });
            (report, ok)
        }
    };
    match args.output {
        Output::Text => super::print(&check_text(&report))?,
        other => super::print_value(&report, other)?,
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn check_text(report: &Value) -> String {
    let text = |key: &str| report.get(key).and_then(Value::as_str).unwrap_or_default();
    let list = |key: &str| -> Vec<String> {
        report
            .get(key)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut out = format!("plugin {}\n", text("file"));
    if report.get("sha256").is_some() {
        out.push_str(&format!("  sha256:       {}\n", text("sha256")));
        out.push_str(&format!(
            "  metadata:     {} {} (interface {})\n",
            text("name"),
            text("version"),
            text("interfaceVersion")
        ));
        out.push_str(&format!(
            "  capabilities: {}\n",
            list("capabilities").join(", ")
        ));
        let imports = list("imports");
        out.push_str(&format!(
            "  imports:      {}\n",
            if imports.is_empty() {
                "none".to_owned()
            } else {
                imports.join(", ")
            }
        ));
        for need in list("wasi") {
            out.push_str(&format!("  wasi:         {need}\n"));
        }
    }
    let problems = list("problems");
    if problems.is_empty() {
        out.push_str("  ok\n");
    }
    for problem in problems {
        out.push_str(&format!("  problem:      {problem}\n"));
    }
    out
}

fn read_input(path: &Path) -> anyhow::Result<Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    crate::yaml::to_json(&text).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

fn call(args: CallArgs) -> anyhow::Result<ExitCode> {
    let runtime = Runtime::new().map_err(|e| anyhow::anyhow!("starting wasmtime: {e:#}"))?;
    let settings = Settings {
        timeout: args.timeout.to_std().unwrap_or(Duration::from_secs(1)),
        ..Settings::default()
    };
    let plugin = load(&runtime, &args.file, settings)?;
    if !plugin.has(args.capability) {
        anyhow::bail!(
            "{} does not export {} (it exports: {})",
            args.file.display(),
            args.capability,
            plugin
                .capabilities()
                .iter()
                .map(|c| c.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let input = crate::plugin::invoke::input_of(read_input(&args.input)?, args.capability)
        .map_err(|e| anyhow::anyhow!("{}: {e}", args.input.display()))?;
    let answer = crate::plugin::invoke::call(&plugin, args.capability, input)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    super::print(&format!("{}\n", serde_json::to_string_pretty(&answer)?))?;
    Ok(ExitCode::SUCCESS)
}
