//! The command line: argument parsing ([`Args`]) and one function per command.
//!
//! Errors are reported here, at the edge, with `anyhow`; exit codes: 0 success, 1 the
//! input has problems (lint findings, invalid Stage, bad object), 2 usage errors.

mod apiserver;
mod bench;
mod duration;
mod explain;
mod bench_plugin;
mod lint;
mod plugin;
mod run;
mod sim;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

pub use duration::parse_duration;

/// kstage plays KWOK Stages against Kubernetes objects.
#[derive(Debug, Parser)]
#[command(name = "kstage", version, about, long_about = None, propagate_version = true)]
pub struct Args {
    /// Log filter (e.g. `info`, `kstage=debug`); also read from `KSTAGE_LOG`.
    #[arg(long, global = true, env = "KSTAGE_LOG", default_value = "warn")]
    pub log: String,
    /// Log lines as text or as one JSON object each (timestamp, level, message, fields,
    /// and the fields of the job and step a line belongs to); also read from
    /// `KSTAGE_LOG_FORMAT`. Default: json for `run` and `up` when stdout is not a terminal
    /// (in a cluster), else text.
    #[arg(long, global = true, env = "KSTAGE_LOG_FORMAT", value_enum)]
    pub log_format: Option<LogFormat>,
    /// Wall time one evaluation of a jq program that does not run natively, or of a CEL
    /// program with comprehensions, may take (it runs in a child process, killed when it
    /// overruns); also read from `KSTAGE_EXPR_TIMEOUT`.
    #[arg(long, global = true, env = "KSTAGE_EXPR_TIMEOUT", default_value = "100ms", value_parser = duration::parse_std_duration)]
    pub expr_timeout: std::time::Duration,
    /// Memory, in MiB, that process may use; also read from `KSTAGE_EXPR_MEMORY`.
    #[arg(long, global = true, env = "KSTAGE_EXPR_MEMORY", default_value_t = 256)]
    pub expr_memory: u64,
    /// Compile plugins every time instead of keeping their compiled code in
    /// `$KSTAGE_CACHE/compiled` (else `$XDG_CACHE_HOME/kstage/compiled`, else
    /// `~/.cache/kstage/compiled`); also read from `KSTAGE_NO_COMPILE_CACHE`.
    #[arg(long, global = true, env = "KSTAGE_NO_COMPILE_CACHE")]
    pub no_compile_cache: bool,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Inspect and validate Stage files.
    #[command(subcommand)]
    Stage(StageCommand),
    /// Simulate Stages over objects on a virtual clock, deterministically.
    Sim(sim::SimArgs),
    /// Check, call and time WebAssembly plugins.
    #[command(subcommand)]
    Plugin(plugin::PluginCommand),
    /// Start an embedded API server with kstage's Stages playing: a cluster on a laptop.
    Up(run::UpArgs),
    /// Play Stages against a cluster (kubeconfig or in-cluster), live from Stage resources too.
    Run(run::RunArgs),
    /// Serve an embedded Kubernetes API server (for kubectl and kube-rs) from memory.
    Apiserver(apiserver::ApiServerArgs),
    /// Benchmark an API server (embedded or a cluster's) as the engine uses it.
    Bench(bench::BenchArgs),
    /// Internal: evaluate jq and CEL programs sent on stdin (the expression sandbox).
    #[command(name = "__eval", hide = true)]
    Eval {
        /// Data memory limit, in bytes.
        #[arg(long)]
        memory: u64,
    },
}

/// `kstage stage ...`.
#[derive(Debug, Subcommand)]
pub enum StageCommand {
    /// Show which Stages match an object and exactly what each would send.
    Explain(explain::ExplainArgs),
    /// Validate Stages and print every problem with its file, Stage and field.
    Lint(lint::LintArgs),
}

/// Output formats of the commands that print data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// For people.
    Text,
    /// YAML.
    Yaml,
    /// JSON.
    Json,
}

/// Stage files or folders (the `*.yaml`, `*.yml`, `*.json` files directly inside).
#[derive(Debug, Clone, clap::Args)]
pub struct StagePaths {
    /// Stage files or folders; repeat or give several.
    #[arg(long = "stages", short = 's', required = true, num_args = 1..)]
    pub stages: Vec<PathBuf>,
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

impl Args {
    /// The log format: the one asked for, else JSON for a daemon whose stdout is not a
    /// terminal (as KWOK decides), else text.
    fn log_format(&self, stdout_is_terminal: bool) -> LogFormat {
        let daemon = matches!(self.command, Command::Run(_) | Command::Up(_));
        match self.log_format {
            Some(format) => format,
            None if daemon && !stdout_is_terminal => LogFormat::Json,
            None => LogFormat::Text,
        }
    }
}

/// Run the command line; returns the process exit code.
pub fn main() -> ExitCode {
    let args = Args::parse();
    use std::io::IsTerminal as _;
    init_tracing(&args.log, args.log_format(std::io::stdout().is_terminal()));
    // Expressions that can run without bound are evaluated in child processes of this
    // binary, within these limits (see `stage::sandbox`).
    match std::env::current_exe() {
        Ok(exe) => crate::stage::sandbox::install(
            exe,
            crate::stage::sandbox::Limits {
                time: args.expr_timeout,
                memory: args.expr_memory.saturating_mul(1 << 20),
            },
        ),
        Err(e) => {
            tracing::warn!("cannot find this binary ({e}): jq and CEL run unbounded in-process")
        }
    }
    plugin::use_compile_cache(!args.no_compile_cache);
    let result = match args.command {
        // The child evaluates in-process (`Jq::outputs_here`, `Cel::reply_here`).
        Command::Eval { memory } => crate::stage::evaluator::serve(memory)
            .map(|()| ExitCode::SUCCESS)
            .map_err(anyhow::Error::from),
        Command::Stage(StageCommand::Explain(a)) => explain::run(a),
        Command::Stage(StageCommand::Lint(a)) => lint::run(a),
        Command::Sim(a) => sim::run(a),
        Command::Plugin(c) => plugin::run(c),
        Command::Apiserver(a) => apiserver::run(a),
        Command::Up(a) => run::up(a),
        Command::Run(a) => run::run(a),
        Command::Bench(a) => bench::run(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            if is_broken_pipe(&e) {
                return ExitCode::SUCCESS;
            }
            eprintln!("error: {e:#}");
            ExitCode::from(1)
        }
    }
}

/// The innermost cause of `e` (the part of a nested error that is not repeated by the
/// layers around it).
pub(super) fn innermost(e: &(dyn std::error::Error + 'static)) -> String {
    let mut inner = e;
    while let Some(source) = inner.source() {
        inner = source;
    }
    inner.to_string()
}

/// The multi-threaded runtime of a long-running command, with `threads` worker threads
/// (`None`: tokio's default, one per CPU the process may use, its cgroup quota
/// included). Plugin compilation runs on tokio's blocking pool either way, so one worker
/// thread does not stall behind a hot swap; plugin calls run on the worker threads.
pub(super) fn runtime(
    threads: Option<std::num::NonZeroUsize>,
) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(threads) = threads {
        builder.worker_threads(threads.get());
    }
    builder.enable_all().build()
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// kube-rs's HTTP layer logs every failed request as an ERROR, retried or not (an outage
/// of 20 s under load wrote a thousand of them). kstage says what matters itself: a debug
/// line per failed step, a warning when the API server cannot be reached and a line when
/// it answers again, an error when a job is given up. kube-rs's lines come back when the
/// filter names `kube_client`.
fn log_filter(filter: &str) -> String {
    if filter.contains("kube_client") {
        filter.to_owned()
    } else {
        format!("{filter},kube_client::client::builder=off")
    }
}

fn init_tracing(filter: &str, format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_new(log_filter(filter))
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        // The event's fields at the top level beside `timestamp`, `level` and `message`;
        // the job's and step's (Stage, object, attempt, step) under `span` and `spans`.
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(true)
            .try_init(),
    };
}

/// Write to stdout, turning a closed pipe into an error the caller treats as success.
fn print(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()?;
    Ok(())
}

/// Load Stages, failing with every problem listed if any Stage is invalid.
fn load_stages(
    paths: &[PathBuf],
    renderer: &crate::template::Renderer,
) -> anyhow::Result<crate::stage::StageSet> {
    Ok(crate::stage::StageSet::new(load_stage_list(
        paths, renderer,
    )?))
}

/// [`load_stages`], as a list.
fn load_stage_list(
    paths: &[PathBuf],
    renderer: &crate::template::Renderer,
) -> anyhow::Result<Vec<crate::stage::Stage>> {
    let loaded = crate::stage::load::load(paths, renderer)?;
    // Lint's own pass, with a renderer of its own: rendering its samples must not touch
    // the run's template environment (pod IPs, the virtual clock).
    let golden = crate::template::Renderer::new(std::sync::Arc::new(crate::template::GoldenEnv));
    if let Ok(linted) = crate::lint::lint_files(paths, &golden) {
        for warning in &linted.warnings {
            tracing::warn!("{warning} (see `kstage stage lint`)");
        }
    }
    if !loaded.problems.is_empty() {
        let list: Vec<String> = loaded.problems.iter().map(|p| format!("  {p}")).collect();
        anyhow::bail!(
            "{} problem{} in the Stages (run `kstage stage lint` for details):\n{}",
            list.len(),
            if list.len() == 1 { "" } else { "s" },
            list.join("\n")
        );
    }
    if loaded.stages.is_empty() {
        let shown: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        anyhow::bail!("no Stage found in {}", shown.join(", "));
    }
    Ok(loaded.stages)
}

/// Read every object (YAML document) in `paths`; a document that is not an object with
/// `apiVersion`, `kind` and `metadata.name` is an error naming its file and index.
fn read_objects(paths: &[PathBuf]) -> anyhow::Result<Vec<serde_json::Value>> {
    let mut objects = Vec::new();
    for (origin, doc) in crate::stage::load::read_documents(paths)? {
        let doc = doc.map_err(|e| anyhow::anyhow!("{origin}: {}", e.cause))?;
        // A `List` (as `kubectl get -o yaml` prints) contributes its items.
        let items = if doc.get("kind").and_then(|k| k.as_str()) == Some("List") {
            doc.get("items")
                .and_then(|i| i.as_array())
                .cloned()
                .unwrap_or_default()
        } else {
            vec![doc]
        };
        for item in items {
            if crate::cluster::ObjectKey::of(&item).is_none()
                && item.pointer("/metadata/generateName").is_none()
            {
                anyhow::bail!(
                    "{origin}: not a Kubernetes object (needs apiVersion, kind and metadata.name)"
                );
            }
            objects.push(item);
        }
    }
    Ok(objects)
}

/// Print data as YAML or JSON.
fn print_value(value: &serde_json::Value, output: Output) -> anyhow::Result<()> {
    match output {
        Output::Json => print(&format!("{}\n", serde_json::to_string_pretty(value)?)),
        Output::Yaml | Output::Text => print(&crate::yaml::to_string(value)),
    }
}

#[cfg(test)]
mod tests {
    use clap::{CommandFactory as _, Parser as _};

    use super::{Args, Command};

    #[test]
    fn the_command_line_is_consistent_and_its_defaults_parse() {
        Args::command().debug_assert();
        // Parsing builds every field: a flag whose type does not match its parser fails
        // here, not in a user's hands.
        for argv in [
            &["kstage", "up"][..],
            &["kstage", "up", "--serve", "off"],
            &["kstage", "run", "--stages", "s"],
            &[
                "kstage",
                "run",
                "--stages",
                "s",
                "--serve",
                "127.0.0.1:9000",
            ],
        ] {
            let args = Args::try_parse_from(argv).expect("parses");
            assert!(matches!(args.command, Command::Up(_) | Command::Run(_)));
        }
        let wrong = Args::try_parse_from(["kstage", "up", "--serve", "8080"]).expect_err("refused");
        assert!(wrong.to_string().contains("or off"), "{wrong}");
    }

    #[test]
    fn threads_are_counted_from_one_and_size_the_runtime() {
        for command in [&["kstage", "up"][..], &["kstage", "run", "-s", "s"]] {
            let with = |threads: &str| {
                let mut argv = command.to_vec();
                argv.extend(["--threads", threads]);
                Args::try_parse_from(argv)
            };
            assert!(with("1").is_ok());
            assert!(with("0").is_err(), "no runtime runs on zero threads");
            assert!(with("many").is_err());
        }
        let bench = |threads: &str| {
            Args::try_parse_from(["kstage", "bench", "--embedded", "--threads", threads])
        };
        assert!(bench("1").is_ok());
        assert!(bench("0").is_err());
        let one = super::runtime(std::num::NonZeroUsize::new(1)).expect("runtime");
        assert_eq!(one.metrics().num_workers(), 1);
        let three = super::runtime(std::num::NonZeroUsize::new(3)).expect("runtime");
        assert_eq!(three.metrics().num_workers(), 3);
    }

    #[test]
    fn kube_rs_request_errors_are_off_unless_the_filter_names_them() {
        assert_eq!(
            super::log_filter("warn"),
            "warn,kube_client::client::builder=off"
        );
        assert_eq!(
            super::log_filter("info,kstage=debug"),
            "info,kstage=debug,kube_client::client::builder=off"
        );
        assert_eq!(
            super::log_filter("warn,kube_client=debug"),
            "warn,kube_client=debug"
        );
        for filter in ["warn", "info,kstage=debug"] {
            assert!(tracing_subscriber::EnvFilter::try_new(super::log_filter(filter)).is_ok());
        }
    }

    #[test]
    fn daemons_log_json_off_a_terminal_unless_told() {
        use super::LogFormat::{Json, Text};
        let format = |argv: &[&str], terminal: bool| {
            Args::try_parse_from(argv)
                .expect("parses")
                .log_format(terminal)
        };
        assert_eq!(format(&["kstage", "up"], false), Json);
        assert_eq!(format(&["kstage", "up"], true), Text);
        assert_eq!(format(&["kstage", "run", "-s", "s"], false), Json);
        assert_eq!(
            format(&["kstage", "up", "--log-format", "text"], false),
            Text
        );
        assert_eq!(
            format(&["kstage", "sim", "-s", "s", "-f", "o"], false),
            Text
        );
        assert_eq!(
            format(
                &[
                    "kstage",
                    "--log-format",
                    "json",
                    "sim",
                    "-s",
                    "s",
                    "-f",
                    "o"
                ],
                true
            ),
            Json
        );
    }
}
