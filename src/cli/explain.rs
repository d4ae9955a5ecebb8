//! `kstage stage explain`.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::{Output, StagePaths};
use crate::action::Typing;
use crate::clock::{Clock, ManualClock, SystemClock};
use crate::explain::{Options, explain};
use crate::template::{GoldenEnv, Renderer, StageEnv, TemplateEnv};

/// The fixed time of KWOK's golden tests.
pub const KWOK_GOLDEN_NOW: &str = "2006-01-02T15:04:05Z";

/// Arguments of `kstage stage explain`.
#[derive(Debug, clap::Args)]
pub struct ExplainArgs {
    #[command(flatten)]
    paths: StagePaths,
    /// KWOK's golden-test format: objects handled as unstructured (merge patches), now
    /// fixed at 2006-01-02T15:04:05Z, delays in nanoseconds, placeholder functions.
    #[arg(long)]
    kwok_golden: bool,
    /// The time delays and `Now` are computed at (RFC 3339); default: the current time.
    #[arg(long, value_parser = parse_time, conflicts_with = "kwok_golden")]
    now: Option<DateTime<Utc>>,
    /// Environment variables sprig's `env` and `expandenv` may read in Stage templates
    /// (`NAME,...`); none by default, so a Stage cannot copy the daemon's secrets into an
    /// object.
    #[arg(long, value_delimiter = ',')]
    template_env: Vec<String>,
    /// Output format (`--kwok-golden` implies yaml).
    #[arg(long, short = 'o', value_enum, default_value_t = Output::Text)]
    output: Output,
    /// The object(s) to explain: a YAML file, possibly with several documents. Written
    /// after the Stage paths (`--stages DIR OBJECT.yaml`): the last path is the object.
    object: Option<PathBuf>,
}

fn parse_time(s: &str) -> Result<DateTime<Utc>, String> {
    DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| format!("not an RFC 3339 time: {e}"))
}

pub(super) fn run(args: ExplainArgs) -> anyhow::Result<ExitCode> {
    let ExplainArgs {
        mut paths,
        kwok_golden,
        now,
        template_env,
        output,
        object,
    } = args;
    // `--stages` takes several paths, so it swallows a trailing object path.
    let object = match object {
        Some(object) => object,
        None if paths.stages.len() >= 2 => paths.stages.pop().unwrap_or_default(),
        None => anyhow::bail!("no object given: kstage stage explain --stages PATH... OBJECT.yaml"),
    };
    let (env, now, typing): (Arc<dyn TemplateEnv>, _, _) = if kwok_golden {
        let now = parse_time(KWOK_GOLDEN_NOW).map_err(anyhow::Error::msg)?;
        (Arc::new(GoldenEnv), now, Typing::Unstructured)
    } else {
        let now = now.unwrap_or_else(|| SystemClock.now());
        let clock = Arc::new(ManualClock::new(now));
        (
            Arc::new(
                StageEnv::new(clock, now, env!("CARGO_PKG_VERSION"))
                    .with_seed(0)
                    .with_env_vars(template_env),
            ),
            now,
            Typing::Typed,
        )
    };
    let renderer = Renderer::new(env);
    let stages = super::load_stages(&paths.stages, &renderer)?;
    let objects = super::read_objects(std::slice::from_ref(&object))?;
    if objects.is_empty() {
        anyhow::bail!("no object in {}", object.display());
    }
    let options = Options {
        now,
        typing,
        detect_noop: !kwok_golden,
    };
    let mut text = String::new();
    for (i, obj) in objects.iter().enumerate() {
        let explanation = explain(&stages, obj, options)
            .map_err(|(stage, e)| anyhow::anyhow!("object #{i}: Stage {stage:?}: {e}"))?;
        if kwok_golden || output != Output::Text {
            if i > 0 && output != Output::Json {
                text.push_str("---\n");
            }
            let value = explanation.to_kwok_golden();
            match output {
                Output::Json => {
                    text.push_str(&format!("{}\n", serde_json::to_string_pretty(&value)?))
                }
                _ => text.push_str(&crate::yaml::to_string(&value)),
            }
        } else {
            if i > 0 {
                text.push('\n');
            }
            text.push_str(&explanation.to_text());
        }
    }
    super::print(&text)?;
    Ok(ExitCode::SUCCESS)
}
