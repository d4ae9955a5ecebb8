//! Stage templates: Go `text/template` (via `gotmpl`) with KWOK's template functions, and
//! the rendered YAML turned into JSON the way KWOK does it.
//!
//! ```text
//!  Stage load:  Renderer::parse(name, src) ──► Template   (parsed once, Send + Sync)
//!                          └ reach: the part of the object it reads (static look)
//!  each step:   Template::render_json(obj) ──► text ──► yaml::to_json ──► patch data
//!                          │ only the reached part of obj becomes template data
//!                          │ functions read the TemplateEnv (clock, version, IPs)
//! ```
//!
//! Semantics follow KWOK's `pkg/utils/gotpl`:
//! - the source is trimmed of surrounding whitespace before parsing (error lines still
//!   count from the untrimmed source);
//! - the object is plain JSON data, so a missing key prints `<no value>` and is nil in
//!   pipelines (`or .metadata.creationTimestamp $now` works, `with` and `range` skip it),
//!   while `index` of a missing list fails as in Go (`index of untyped nil`);
//! - the rendered text is read as YAML 1.1 like `sigs.k8s.io/yaml` ([`crate::yaml`]).
//!
//! Functions: KWOK's `Now`, `StartTime`, `Version`, `Quote`, `YAML`, `NodeConditions`,
//! `NodeIP`, `NodeName`, `NodePort`, `PodIP`, `NodeIPWith`, `NodeIPsWith`, `PodIPWith`,
//! `PodIPsWith`, and every function of sprig v3's `TxtFuncMap` ([`sprig`]), on top of Go's
//! builtins (`and`, `or`, `not`, `eq`, `index`, `printf`, ...).

mod check;
mod env;
mod funcs;
#[cfg(test)]
mod golden;
mod reach;
mod sprig;
#[cfg(test)]
mod tests;
mod value;

use std::sync::Arc;

pub use env::{CidrError, GOLDEN_NOW, GoldenEnv, PodIpRequest, StageEnv, TemplateEnv};

use crate::yaml::YamlError;

/// The most text one render, or one `YAML` call in it, may produce. A Stage's template
/// is hostile input: `{{ range 10000000 }}{{ printf "%60000d" 1 }}{{ end }}` would ask
/// for 600 GB. 16 MiB is far above any object the API server takes (its request limit is
/// 3 MiB), so no Stage that could work is refused. What sprig's functions build
/// (`repeat`, `until`, keys ...) has a budget of its own of the same size per render.
pub(crate) const MAX_OUTPUT: usize = 16 << 20;

/// The template output, refused past [`MAX_OUTPUT`] bytes.
#[derive(Default)]
struct BoundedOutput {
    text: String,
    overflowed: bool,
}

impl std::fmt::Write for BoundedOutput {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        if self.text.len() + s.len() > MAX_OUTPUT {
            self.overflowed = true;
            return Err(std::fmt::Error);
        }
        self.text.push_str(s);
        Ok(())
    }
}

/// A template that failed to parse, to execute, or to produce YAML.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TemplateError {
    /// The source is not a valid template. Not retryable: fix the Stage.
    #[error("template {template:?}: {}{message}", location(*line, *column))]
    Parse {
        /// The template's name.
        template: String,
        /// 1-based line in the source, when known.
        line: Option<usize>,
        /// 1-based column in the source, when known.
        column: Option<usize>,
        /// What is wrong.
        message: String,
    },
    /// Execution failed (a function error, a wrong argument, `index` out of range ...).
    /// Depends on the object: another object may render fine.
    #[error("template {template:?}: {message}")]
    Execute {
        /// The template's name.
        template: String,
        /// The cause, as the template engine reports it.
        message: String,
    },
    /// An IP function found its address range full. Transient: addresses come back as
    /// pods go, so the step is retried with backoff.
    #[error("template {template:?}: {message}")]
    AddressRangeExhausted {
        /// The template's name.
        template: String,
        /// The range, as its function describes it.
        range: String,
        /// The cause, as the template engine reports it.
        message: String,
    },
    /// The rendered text is not YAML that converts to JSON.
    #[error("template {template:?}: rendered text: {error}")]
    Yaml {
        /// The template's name.
        template: String,
        /// The YAML problem (its line is in `rendered`).
        error: YamlError,
        /// The rendered text.
        rendered: String,
    },
}

fn location(line: Option<usize>, column: Option<usize>) -> String {
    match (line, column) {
        (Some(l), Some(c)) => format!("line {l}, column {c}: "),
        (Some(l), None) => format!("line {l}: "),
        _ => String::new(),
    }
}

/// Parses templates with KWOK's functions bound to one [`TemplateEnv`].
#[derive(Clone)]
pub struct Renderer {
    env: Arc<dyn TemplateEnv>,
    funcs: gotmpl::FuncMap,
}

impl std::fmt::Debug for Renderer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Renderer")
            .field("functions", &self.funcs.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl Renderer {
    /// A renderer whose templates read `env`.
    pub fn new(env: Arc<dyn TemplateEnv>) -> Self {
        let funcs = funcs::func_map(&env);
        Self { env, funcs }
    }

    /// The env the templates read.
    pub fn env(&self) -> &Arc<dyn TemplateEnv> {
        &self.env
    }

    /// Parses `src` once; `name` names the template in errors (e.g.
    /// `pod-ready/spec.next.statusTemplate`).
    ///
    /// # Errors
    /// [`TemplateError::Parse`] with the line and column of the first syntax error.
    pub fn parse(&self, name: &str, src: &str) -> Result<Template, TemplateError> {
        let trimmed = src.trim();
        let leading = &src[..src.len() - src.trim_start().len()];
        let line_offset = leading.matches('\n').count();
        let column_offset = leading.rsplit('\n').next().map_or(0, |l| l.chars().count());
        let inner = gotmpl::Template::new(name)
            .funcs(self.funcs.clone())
            .parse(trimmed)
            .map_err(|e| match e {
                gotmpl::TemplateError::Parse {
                    line, col, message, ..
                }
                | gotmpl::TemplateError::Lex {
                    line, col, message, ..
                } => TemplateError::Parse {
                    template: name.to_owned(),
                    line: Some(line + line_offset),
                    column: Some(if line == 1 { col + column_offset } else { col }),
                    message,
                },
                other => TemplateError::Parse {
                    template: name.to_owned(),
                    line: None,
                    column: None,
                    message: other.to_string(),
                },
            })?;
        if let Some((func, pos)) =
            check::undefined_function(&inner, &|f| self.funcs.contains_key(f))
        {
            let line_start = trimmed
                .get(..pos.offset)
                .and_then(|before| before.rfind('\n'))
                .map_or(0, |i| i + 1);
            let col = trimmed
                .get(line_start..pos.offset)
                .map_or(0, |s| s.chars().count())
                + 1;
            return Err(TemplateError::Parse {
                template: name.to_owned(),
                line: Some(pos.line + line_offset),
                column: Some(if pos.line == 1 {
                    col + column_offset
                } else {
                    col
                }),
                message: format!("function {func:?} not defined"),
            });
        }
        let reach = reach::of_template(&inner, name);
        Ok(Template {
            name: name.to_owned(),
            source: src.to_owned(),
            inner,
            reach,
        })
    }
}

/// A parsed template, ready to render any number of objects from any thread.
pub struct Template {
    name: String,
    source: String,
    inner: gotmpl::Template,
    /// The part of the object the template reads, converted for each render.
    reach: reach::Reach,
}

impl std::fmt::Debug for Template {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Template")
            .field("name", &self.name)
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

impl Template {
    /// The template's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The source as given to [`Renderer::parse`].
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Renders `obj` (`.` and `$` in the template) to text.
    ///
    /// # Errors
    /// [`TemplateError::Execute`] when execution fails.
    pub fn render(&self, obj: &serde_json::Value) -> Result<String, TemplateError> {
        self.execute(&value::from_json_pruned(obj, &self.reach))
    }

    /// [`Template::render`] with the whole object converted (what pruning must match).
    #[cfg(test)]
    pub(crate) fn render_unpruned(&self, obj: &serde_json::Value) -> Result<String, TemplateError> {
        self.execute(&value::from_json(obj))
    }

    /// Whether renders convert only part of the object.
    #[cfg(test)]
    pub(crate) fn is_pruned(&self) -> bool {
        self.reach != reach::Reach::Whole
    }

    /// Executes the template on already converted data.
    fn execute(&self, data: &gotmpl::Value) -> Result<String, TemplateError> {
        crate::ipam::take_exhausted();
        sprig::reset_budget();
        let mut out = BoundedOutput::default();
        let result = self.inner.execute_fmt(&mut out, data);
        if out.overflowed {
            crate::ipam::take_exhausted();
            return Err(TemplateError::Execute {
                template: self.name.clone(),
                message: format!("the output is over {MAX_OUTPUT} bytes"),
            });
        }
        result.map(|()| out.text).map_err(|e| {
            let template = self.name.clone();
            let message = e.to_string();
            match crate::ipam::take_exhausted() {
                Some(range) => TemplateError::AddressRangeExhausted {
                    template,
                    range,
                    message,
                },
                None => TemplateError::Execute { template, message },
            }
        })
    }

    /// Renders `obj` and reads the text as one YAML document, as KWOK does for patches.
    ///
    /// # Errors
    /// [`TemplateError::Execute`] when execution fails, [`TemplateError::Yaml`] when the
    /// text is not YAML that converts to JSON.
    pub fn render_json(&self, obj: &serde_json::Value) -> Result<serde_json::Value, TemplateError> {
        let rendered = self.render(obj)?;
        crate::yaml::to_json(&rendered).map_err(|error| TemplateError::Yaml {
            template: self.name.clone(),
            error,
            rendered,
        })
    }
}
