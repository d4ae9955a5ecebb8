//! The KWOK Stage model: the wire format ([`v1alpha1`]), its compiled form ([`Stage`]),
//! selectors, weights and delays, and loading Stage files ([`load`]).
//!
//! A [`v1alpha1::Stage`] is compiled once into a [`Stage`]: jq and CEL programs are
//! compiled, templates parsed, and the legacy `spec.next` is converted to steps. Every
//! problem is reported with the field it is about, and one bad Stage never stops the
//! others from compiling (whether a problem then stops a command is the caller's policy:
//! the README's `stage lint`). Programs that can run without bound are evaluated in a child
//! process within limits ([`sandbox`], the child: [`evaluator`]).

mod compile;
pub mod error;
pub mod evaluator;
pub mod expr;
pub mod load;
pub mod sandbox;
pub mod selector;
mod set;
pub mod v1alpha1;
pub mod value;

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

pub use compile::compile;
pub use error::FieldError;
pub use set::StageSet;

pub use crate::cluster::ResourceRef;
use crate::patch::PatchType;
use crate::template::Template;
use selector::Selector;
use value::{Delay, IntFrom};

/// Where a Stage was loaded from, for error messages.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Origin {
    /// The file, or `None` for a Stage that did not come from a file.
    pub file: Option<PathBuf>,
    /// The index of the YAML document in that file, from 0.
    pub document: usize,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.file {
            Some(file) => write!(f, "{}#{}", file.display(), self.document),
            None => write!(f, "<inline>#{}", self.document),
        }
    }
}

/// A compiled Stage: ready to match objects and compute the actions of its steps.
#[derive(Debug)]
pub struct Stage {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.annotations` (plugin bindings read `kstage.dev/*`).
    pub annotations: BTreeMap<String, String>,
    /// `spec.resourceRef`.
    pub resource: ResourceRef,
    /// `spec.selector`, compiled.
    pub selector: Selector,
    /// `spec.weight` / `spec.weightFrom`.
    pub weight: IntFrom,
    /// `spec.delay`; `None` plays the Stage at once.
    pub delay: Option<Delay>,
    /// The steps, in order (`spec.next` already converted).
    pub steps: Vec<Step>,
    /// `spec.immediateNextStage`.
    pub immediate_next_stage: bool,
    /// Where the Stage came from.
    pub origin: Origin,
}

/// One step of a Stage. A wire step that sets several fields becomes several of these,
/// in KWOK's order (event, finalizers, delete, patch, apply).
#[derive(Debug)]
pub enum Step {
    /// Emit an event on the object.
    Event(v1alpha1::StageEvent),
    /// Change `metadata.finalizers` (sent as a JSON patch).
    Finalizers(v1alpha1::StageFinalizers),
    /// Delete the object.
    Delete,
    /// Patch the object with a rendered template.
    Patch(PatchStep),
    /// Apply a rendered object (the object itself or another one).
    Apply(ApplyStep),
}

impl Step {
    /// A short name for logs and tables: `event`, `finalizers`, `delete`, `patch`, `apply`.
    pub fn kind(&self) -> &'static str {
        match self {
            Step::Event(_) => "event",
            Step::Finalizers(_) => "finalizers",
            Step::Delete => "delete",
            Step::Patch(_) => "patch",
            Step::Apply(_) => "apply",
        }
    }
}

/// A compiled patch step.
#[derive(Debug)]
pub struct PatchStep {
    /// The subresource (`status`), or `None` for the object itself.
    pub subresource: Option<String>,
    /// Wrap the rendered template under this key.
    pub root: Option<String>,
    /// The parsed template.
    pub template: Template,
    /// The explicit patch type; `None` means the default for the kind.
    pub patch_type: Option<PatchType>,
    /// The user to impersonate.
    pub impersonation: Option<String>,
}

/// A compiled apply step.
#[derive(Debug)]
pub struct ApplyStep {
    /// The subresource (`status`), or `None` for the object itself.
    pub subresource: Option<String>,
    /// The parsed template rendering a whole object.
    pub template: Template,
    /// How the object is written: server-side apply by default.
    pub patch_type: PatchType,
    /// The user to impersonate.
    pub impersonation: Option<String>,
}
