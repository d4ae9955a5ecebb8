//! `kstage plugin call`: one call, its answer printed as JSON; given a test case, the
//! answer is checked against the case's expectation too.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::plugin::cases::{self, Case, Expect};
use crate::plugin::{Capability, invoke};

/// Arguments of `kstage plugin call`.
#[derive(Debug, clap::Args)]
pub struct CallArgs {
    /// The plugin component (`.wasm`).
    file: PathBuf,
    /// `selector`, `renderer`, `classifier` or `metadata`; a test case file names its own.
    capability: Option<Capability>,
    /// The call's input, YAML or JSON: for `selector` `{object, candidates: [{name,
    /// weight, delayMs}]}`; for `renderer` `{stage, template, object}`; for `classifier`
    /// `{kind, status, reason, message, retryAfterMs, stage, step, attempt, object}`.
    /// A test case file (`{capability, input, expect | expectError}`, as in the example
    /// plugins' `cases/`) gives its `input`, and the answer must meet its expectation
    /// (exit 1 if not).
    #[arg(long, short = 'i')]
    input: PathBuf,
    #[command(flatten)]
    guest: super::GuestArgs,
}

pub(super) fn run(args: CallArgs) -> anyhow::Result<ExitCode> {
    let document = super::read_document(&args.input)?;
    let case = if Case::is_case(&document) {
        let name = args.input.display().to_string();
        Some(
            Case::from_value(&name, document.clone())
                .map_err(|e| anyhow::anyhow!("{name}: {e}"))?,
        )
    } else {
        None
    };
    let capability = match (&case, args.capability) {
        (Some(case), Some(asked)) if case.capability != asked => anyhow::bail!(
            "{}: the case is a {} call, not a {asked} one",
            args.input.display(),
            case.capability
        ),
        (Some(case), _) => case.capability,
        (None, Some(asked)) => asked,
        (None, None) => anyhow::bail!(
            "which capability? give selector, renderer, classifier or metadata after the file"
        ),
    };
    let plugin = super::load(&super::runtime()?, &args.file, args.guest.settings())?;
    if capability != Capability::Metadata && !plugin.has(capability) {
        anyhow::bail!(
            "{} does not export {capability} (it exports: {})",
            args.file.display(),
            plugin
                .capabilities()
                .iter()
                .map(|c| c.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let input = match &case {
        Some(case) => case.input.clone(),
        None => document,
    };
    let answer = invoke::call(&plugin, capability, input);
    let Some(case) = case else {
        let answer = answer.map_err(|e| anyhow::anyhow!("{e}"))?;
        crate::cli::print(&format!("{}\n", serde_json::to_string_pretty(&answer)?))?;
        return Ok(ExitCode::SUCCESS);
    };
    match &answer {
        Ok(value) => crate::cli::print(&format!("{}\n", serde_json::to_string_pretty(value)?))?,
        Err(error) if matches!(case.expect, Expect::Error(_)) => {
            crate::cli::print(&format!("error (as expected): {error}\n"))?
        }
        Err(error) => anyhow::bail!("{error}"),
    }
    let problems = cases::check(&case.expect, &answer);
    if problems.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    eprintln!(
        "{}: the answer does not meet the case's expectation:",
        args.input.display()
    );
    for problem in problems {
        eprintln!("  {problem}");
    }
    Ok(ExitCode::from(1))
}
