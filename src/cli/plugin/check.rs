//! `kstage plugin check`: what a component is, and whether kstage would load it.

use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::{Value, json};

use crate::cli::Output;
use crate::plugin::{Runtime, Settings};

/// Arguments of `kstage plugin check`.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// The plugin component (`.wasm`).
    file: PathBuf,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value = "text")]
    output: Output,
    /// Let the plugin's stderr through to the terminal (by default it is kept, and its
    /// last lines are shown when a call traps).
    #[arg(long)]
    stderr: bool,
}

/// Where the component's code came from: the disk cache, compiled now, or compiled with
/// no disk cache.
fn compile_cache(runtime: &Runtime) -> String {
    match runtime.disk_cache() {
        Some((dir, stats)) if stats.hits > 0 => format!("read from the cache in {}", dir.display()),
        Some((dir, stats)) if stats.misses > 0 => {
            format!("compiled, and cached in {}", dir.display())
        }
        Some((dir, _)) => format!("compiled (could not be cached in {})", dir.display()),
        None => "compiled (no compile cache)".to_owned(),
    }
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

pub(super) fn run(args: CheckArgs) -> anyhow::Result<ExitCode> {
    let runtime = super::runtime()?;
    let file = args.file.display().to_string();
    let mut settings = Settings::default();
    settings.grants.stderr = args.stderr;
    let (report, ok) = match super::load(&runtime, &args.file, settings) {
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
                "compileCache": compile_cache(&runtime),
            });
            (report, ok)
        }
    };
    match args.output {
        Output::Text => crate::cli::print(&check_text(&report))?,
        other => crate::cli::print_value(&report, other)?,
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
        out.push_str(&format!("  compiled:     {}\n", text("compileCache")));
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
