//! `kstage plugin test FILE.wasm [CASES...]`: run test cases against a plugin and report
//! each as passed or failed (with what differs), as text, JSON or JUnit XML; exit 1 when
//! any fails.
//!
//! Cases are files or folders of files (`*.yaml`, `*.yml`, `*.json`); with none given,
//! the folder `cases/` beside the component, else `cases/` in the current folder.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use serde_json::{Value, json};

use crate::plugin::cases::{self, Bench, Case};
use crate::plugin::{Capability, Plugin};

/// How `kstage plugin test` reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TestOutput {
    /// A line per case, what differs under each failure.
    Text,
    /// One JSON document.
    Json,
    /// JUnit XML, for CI systems.
    Junit,
}

/// Arguments of `kstage plugin test`.
#[derive(Debug, clap::Args)]
pub struct TestArgs {
    /// The plugin component (`.wasm`).
    file: PathBuf,
    /// Case files, or folders of them; default: `cases/` beside the component, else
    /// `cases/` in the current folder.
    cases: Vec<PathBuf>,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value = "text")]
    output: TestOutput,
    /// Also time each case that has a `budget` and fail it when its p99 is over.
    #[arg(long)]
    bench: bool,
    #[command(flatten)]
    guest: super::GuestArgs,
}

/// One case's run.
#[derive(Debug)]
pub(super) struct Ran {
    pub name: String,
    pub path: PathBuf,
    pub capability: Option<Capability>,
    pub took: Duration,
    /// Why it failed; empty when it passed.
    pub problems: Vec<String>,
    pub answer: Option<Result<Value, String>>,
    pub bench: Option<Bench>,
}

impl Ran {
    pub fn passed(&self) -> bool {
        self.problems.is_empty()
    }
}

pub(super) fn run(args: TestArgs) -> anyhow::Result<ExitCode> {
    let files = case_files(&args.file, &args.cases)?;
    let plugin = super::load(&super::runtime()?, &args.file, args.guest.settings())?;
    let ran: Vec<Ran> = files
        .iter()
        .map(|path| run_one(&plugin, path, args.bench))
        .collect();
    let suite = args
        .file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    match args.output {
        TestOutput::Text => crate::cli::print(&text(&ran))?,
        TestOutput::Json => {
            crate::cli::print_value(&report(&suite, &ran), crate::cli::Output::Json)?
        }
        TestOutput::Junit => crate::cli::print(&super::junit::xml(&suite, &ran))?,
    }
    Ok(if ran.iter().all(Ran::passed) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The case files named (folders: their case files), or the default folder's.
fn case_files(component: &Path, given: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    let given: Vec<PathBuf> = if given.is_empty() {
        let beside = component.parent().unwrap_or(Path::new(".")).join("cases");
        let here = PathBuf::from("cases");
        match [beside, here].into_iter().find(|d| d.is_dir()) {
            Some(dir) => vec![dir],
            None => anyhow::bail!(
                "no cases given, and no cases/ folder beside {} or in the current folder",
                component.display()
            ),
        }
    } else {
        given.to_vec()
    };
    let mut files = Vec::new();
    for path in given {
        if path.is_dir() {
            let found =
                cases::files_in(&path).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
            if found.is_empty() {
                anyhow::bail!("{}: no case files (*.yaml, *.yml, *.json)", path.display());
            }
            files.extend(found);
        } else {
            files.push(path);
        }
    }
    Ok(files)
}

fn run_one(plugin: &Plugin, path: &Path, bench: bool) -> Ran {
    let name = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut ran = Ran {
        name,
        path: path.to_owned(),
        capability: None,
        took: Duration::ZERO,
        problems: Vec::new(),
        answer: None,
        bench: None,
    };
    let case = match Case::load(path) {
        Ok(case) => case,
        Err(e) => {
            ran.problems.push(format!("not a case: {e}"));
            return ran;
        }
    };
    ran.capability = Some(case.capability);
    if case.capability != Capability::Metadata && !plugin.has(case.capability) {
        ran.problems
            .push(format!("the plugin does not export {}", case.capability));
        return ran;
    }
    let outcome = cases::run(plugin, &case, bench);
    ran.took = outcome.took;
    ran.problems = outcome.problems;
    ran.answer = Some(outcome.answer);
    ran.bench = outcome.bench;
    ran
}

fn millis(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

fn text(ran: &[Ran]) -> String {
    let width = ran.iter().map(|r| r.name.len()).max().unwrap_or(0);
    let mut out = String::new();
    for r in ran {
        let verdict = if r.passed() { "ok  " } else { "FAIL" };
        let capability = r.capability.map(Capability::as_str).unwrap_or("?");
        out.push_str(&format!(
            "{verdict}  {:width$}  {capability:<10}  {}",
            r.name,
            millis(r.took)
        ));
        if let Some(bench) = &r.bench {
            out.push_str(&format!("  p99 {:?} ({} calls)", bench.p99, bench.calls));
        }
        out.push('\n');
        if !r.passed() {
            out.push_str(&format!("      {}\n", r.path.display()));
            for problem in &r.problems {
                for line in problem.lines() {
                    out.push_str(&format!("      {line}\n"));
                }
            }
        }
    }
    let passed = ran.iter().filter(|r| r.passed()).count();
    out.push_str(&format!(
        "result: {passed} passed, {} failed\n",
        ran.len() - passed
    ));
    out
}

fn report(suite: &str, ran: &[Ran]) -> Value {
    let cases: Vec<Value> = ran
        .iter()
        .map(|r| {
            let mut case = json!({
                "name": r.name,
                "file": r.path.display().to_string(),
                "capability": r.capability,
                "passed": r.passed(),
                "problems": r.problems,
                "micros": r.took.as_micros() as u64,
            });
            match &r.answer {
                Some(Ok(answer)) => case["answer"] = answer.clone(),
                Some(Err(error)) => case["error"] = json!(error),
                None => {}
            }
            if let Some(bench) = &r.bench {
                case["p99Micros"] = json!(bench.p99.as_secs_f64() * 1e6);
                case["benchCalls"] = json!(bench.calls);
            }
            case
        })
        .collect();
    let passed = ran.iter().filter(|r| r.passed()).count();
    json!({
        "plugin": suite,
        "passed": passed,
        "failed": ran.len() - passed,
        "cases": cases,
    })
}
