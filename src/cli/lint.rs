//! `kstage stage lint`.

use std::process::ExitCode;
use std::sync::Arc;

use super::StagePaths;
use crate::template::{GoldenEnv, Renderer};

/// Arguments of `kstage stage lint`.
#[derive(Debug, clap::Args)]
pub struct LintArgs {
    #[command(flatten)]
    paths: StagePaths,
}

pub(super) fn run(args: LintArgs) -> anyhow::Result<ExitCode> {
    let LintArgs { paths } = args;
    // Linting renders only samples, so the template environment does not matter.
    let renderer = Renderer::new(Arc::new(GoldenEnv));
    let crate::lint::Linted { loaded, warnings } =
        crate::lint::lint_files(&paths.stages, &renderer)?;
    let mut out = String::new();
    for problem in &loaded.problems {
        out.push_str(&format!("{problem}\n"));
    }
    for warning in &warnings {
        out.push_str(&format!("warning: {warning}\n"));
    }
    let n = loaded.problems.len();
    let w = warnings.len();
    out.push_str(&format!(
        "{} Stage{} valid, {n} problem{}, {w} warning{}\n",
        loaded.stages.len(),
        if loaded.stages.len() == 1 { "" } else { "s" },
        if n == 1 { "" } else { "s" },
        if w == 1 { "" } else { "s" },
    ));
    super::print(&out)?;
    // Warnings do not fail: the Stages load and kstage bounds what they warn about.
    Ok(if n == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
