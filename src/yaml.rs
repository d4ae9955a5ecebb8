//! YAML ⇄ JSON, with the scalar rules KWOK gets from `sigs.k8s.io/yaml` (go-yaml v2, YAML 1.1).
//!
//! Owns every conversion between YAML text and [`serde_json::Value`] in kstage: Stage files,
//! object files, rendered templates ([`to_json`], [`documents`]) and YAML output
//! ([`to_string`], which the template function `YAML` also uses).
//!
//! Parsing walks the events of `granit-parser` (re-exported by serde-saphyr) and resolves
//! each scalar the way go-yaml v2 does for untyped data, so a rendered template means the
//! same to kstage as to KWOK:
//! - only **plain** (unquoted) scalars are typed; quoted and block scalars are strings;
//! - `y Y yes Yes YES on On ON true True TRUE` are `true`, `n N no No NO off Off OFF false
//!   False FALSE` are `false`, `~ null Null NULL` and the empty scalar are null;
//! - integers follow Go's `strconv.ParseInt(s, 0, 64)` after removing `_` (so `0755` is octal,
//!   `0x1F` hex, `0b11` binary), then `ParseUint`; floats match `[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?`
//!   or start with `.`; integral floats become JSON integers, as Go's JSON encoder prints them;
//! - non-string keys become strings the way `sigs.k8s.io/yaml` converts them (`1.5`, `true`);
//!   null, `uint64`, sequence and mapping keys are errors;
//! - `<<` merge keys are expanded; anchors and aliases are supported (with an expansion budget);
//! - `NaN`/`Inf` values and `!!binary` are rejected, as the JSON conversion rejects them.
//!
//! [`to_string`] writes block YAML in go-yaml v2's style (key order, indentation, quoting,
//! literal blocks, folding at 80 columns, `? key` for long keys), so its output matches
//! KWOK's YAML byte for byte and always reads back through [`to_json`] to the same value.
//!
//! ```text
//!  text ──► fast (plain block subset, ~6 µs/KB) ──► Value
//!    └────► load (granit events, everything else) ──┘     emit: Value ──► text
//!                  scalar: go-yaml v2 typing, Go float spelling
//! ```
//! The fast path answers only for documents it is sure about; a differential test holds it
//! to the full loader's answers.

mod emit;
mod fast;
mod load;
mod scalar;

use std::fmt::Write as _;

use serde_json::Value;
use serde_saphyr::granit_parser::ScanError;

/// A YAML document that could not be parsed or converted to JSON.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.describe())]
pub struct YamlError {
    message: String,
    line: Option<usize>,
    column: Option<usize>,
    document: Option<usize>,
}

impl YamlError {
    pub(super) fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            line: None,
            column: None,
            document: None,
        }
    }

    pub(super) fn at(mut self, line: usize, column: usize) -> Self {
        self.line = Some(line);
        self.column = Some(column);
        self
    }

    pub(super) fn in_document(mut self, document: usize) -> Self {
        self.document = Some(document);
        self
    }

    pub(super) fn from_scan(err: &ScanError) -> Self {
        let mark = err.marker();
        Self::new(err.info()).at(mark.line(), mark.col() + 1)
    }

    /// What is wrong.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The 1-based line of the problem, when known.
    pub fn line(&self) -> Option<usize> {
        self.line
    }

    /// The 1-based column of the problem, when known.
    pub fn column(&self) -> Option<usize> {
        self.column
    }

    /// The 0-based index of the document (in a multi-document stream) that holds the problem.
    pub fn document(&self) -> Option<usize> {
        self.document
    }

    fn describe(&self) -> String {
        let mut out = String::from("invalid YAML");
        match (self.line, self.column) {
            (Some(line), Some(col)) => {
                let _ = write!(out, " at line {line}, column {col}");
            }
            (Some(line), None) => {
                let _ = write!(out, " at line {line}");
            }
            _ => {}
        }
        if let Some(doc) = self.document.filter(|d| *d > 0) {
            let _ = write!(out, " (document {})", doc + 1);
        }
        out.push_str(": ");
        out.push_str(&self.message);
        out
    }
}

/// Parses a multi-document YAML stream; empty and `null` documents are skipped.
///
/// # Errors
/// A [`YamlError`] naming the line, column and document of the first problem.
pub fn documents(src: &str) -> Result<Vec<Value>, YamlError> {
    if let Some(doc) = fast::try_parse(src) {
        return Ok(if doc.is_null() { Vec::new() } else { vec![doc] });
    }
    let mut out = Vec::new();
    load::load(src, false, |doc| {
        if !doc.is_null() {
            out.push(doc);
        }
    })?;
    Ok(out)
}

/// Parses one YAML document (the first of the stream, as go-yaml's `Unmarshal` does);
/// an empty input is [`Value::Null`].
///
/// # Errors
/// A [`YamlError`] naming the line and column of the first problem.
pub fn to_json(src: &str) -> Result<Value, YamlError> {
    if let Some(doc) = fast::try_parse(src) {
        return Ok(doc);
    }
    let mut first = None;
    load::load(src, true, |doc| first = Some(doc))?;
    Ok(first.unwrap_or(Value::Null))
}

/// Writes `value` as block YAML the way go-yaml v2 (`sigs.k8s.io/yaml.Marshal`) does: keys
/// in go-yaml's order, sequences in mappings not indented, strings quoted whenever plain
/// text would read back as something else (`"True"`, `""`, `"1"`, `'a: b'`), multi-line
/// strings as literal blocks, long lines folded at 80 columns. The output ends with a
/// newline and reads back through [`to_json`] to `value` (integral floats read back as
/// integers).
pub fn to_string(value: &Value) -> String {
    emit::to_string(value)
}

/// Whether `src` takes the fast path (for tests that check templates stay on it).
#[cfg(test)]
pub(crate) fn takes_fast_path(src: &str) -> bool {
    fast::try_parse(src).is_some()
}
