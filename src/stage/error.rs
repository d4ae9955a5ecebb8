//! Errors that name the field of a Stage they are about.

/// A problem with one field of a Stage, e.g. `spec.selector.matchExpressions[2].key:
/// jq parse error ...`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path}: {cause}")]
pub struct FieldError {
    /// The field path, in KWOK's camelCase with `[i]` indices (`spec.steps[1].patch.template`).
    pub path: String,
    /// What is wrong with it.
    pub cause: String,
}

impl FieldError {
    /// A problem at `path`.
    pub fn new(path: impl Into<String>, cause: impl std::fmt::Display) -> Self {
        Self {
            path: path.into(),
            cause: cause.to_string(),
        }
    }
}
