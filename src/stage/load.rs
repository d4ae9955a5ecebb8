//! Loading Stages from files and folders of (multi-document) YAML.
//!
//! Documents of other kinds are skipped with a debug log, so a folder may mix Stages
//! with other manifests. Every problem (unreadable YAML, a field of the wrong type, a jq
//! program that does not compile ...) is collected with its file, document index, Stage
//! name and field path; the Stages without problems load regardless.

use std::fmt;
use std::path::{Path, PathBuf};

use super::{FieldError, Origin, Stage, compile, v1alpha1};
use crate::template::Renderer;

/// A problem with one document of a Stage file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// Where the document is.
    pub origin: Origin,
    /// The Stage's name, when it got that far.
    pub stage: Option<String>,
    /// The field and the cause.
    pub error: FieldError,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.origin)?;
        if let Some(stage) = &self.stage {
            write!(f, " stage {stage:?}")?;
        }
        write!(f, ": {}", self.error)
    }
}

/// A path that could not be read at all.
#[derive(Debug, thiserror::Error)]
#[error("cannot read {}: {source}", path.display())]
pub struct ReadError {
    /// The file or folder.
    pub path: PathBuf,
    /// Why.
    #[source]
    pub source: std::io::Error,
}

/// What loading found: the Stages that compiled and the problems of the others.
#[derive(Debug, Default)]
pub struct Loaded {
    /// Compiled Stages, in file order.
    pub stages: Vec<Stage>,
    /// Every problem found.
    pub problems: Vec<Problem>,
}

impl Loaded {
    /// Take the outcome of loading one document: a Stage (unless another of that name
    /// came first), nothing (not a Stage), or its problems.
    fn add(
        &mut self,
        origin: Origin,
        result: Result<Option<Stage>, (Option<String>, Vec<FieldError>)>,
    ) {
        match result {
            Ok(None) => {}
            Ok(Some(stage)) => {
                if self.stages.iter().any(|s| s.name == stage.name) {
                    self.problems.push(Problem {
                        origin,
                        stage: Some(stage.name.clone()),
                        error: FieldError::new(
                            "metadata.name",
                            "a Stage with this name was already loaded; this one is ignored",
                        ),
                    });
                } else {
                    self.stages.push(stage);
                }
            }
            Err((stage, errors)) => {
                self.problems
                    .extend(errors.into_iter().map(|error| Problem {
                        origin: origin.clone(),
                        stage: stage.clone(),
                        error,
                    }));
            }
        }
    }
}

/// The files a list of paths names: files as given, and the `*.yaml`, `*.yml` and `*.json`
/// files inside folders, recursively, sorted by path. Entries whose name starts with `.`
/// are skipped, so the `..data` links of a Kubernetes ConfigMap volume are not read twice.
pub fn expand_paths(paths: &[PathBuf]) -> Result<Vec<PathBuf>, ReadError> {
    let mut files = Vec::new();
    for path in paths {
        let meta = std::fs::metadata(path).map_err(|source| ReadError {
            path: path.clone(),
            source,
        })?;
        if meta.is_dir() {
            let mut found = Vec::new();
            walk(path, &mut found)?;
            found.sort();
            files.extend(found);
        } else {
            files.push(path.clone());
        }
    }
    Ok(files)
}

fn walk(dir: &Path, found: &mut Vec<PathBuf>) -> Result<(), ReadError> {
    let error = |source| ReadError {
        path: dir.to_path_buf(),
        source,
    };
    for entry in std::fs::read_dir(dir).map_err(error)? {
        let path = entry.map_err(error)?.path();
        let hidden = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with('.'));
        if hidden {
            continue;
        }
        if path.is_dir() {
            walk(&path, found)?;
        } else if is_manifest(&path) && path.is_file() {
            found.push(path);
        }
    }
    Ok(())
}

/// One YAML document of a file: where it is, and its value or why it is not valid YAML.
pub type Document = (Origin, Result<serde_json::Value, FieldError>);

/// Read every YAML document of every file the paths name (see [`expand_paths`]).
/// A document that is not valid YAML gives a problem instead of a value.
pub fn read_documents(paths: &[PathBuf]) -> Result<Vec<Document>, ReadError> {
    let mut out = Vec::new();
    for file in expand_paths(paths)? {
        let text = std::fs::read_to_string(&file).map_err(|source| ReadError {
            path: file.clone(),
            source,
        })?;
        match crate::yaml::documents(&text) {
            Ok(docs) => {
                for (document, doc) in docs.into_iter().enumerate() {
                    let origin = Origin {
                        file: Some(file.clone()),
                        document,
                    };
                    out.push((origin, Ok(doc)));
                }
            }
            Err(e) => out.push((
                Origin {
                    file: Some(file.clone()),
                    document: 0,
                },
                Err(FieldError::new("<yaml>", e)),
            )),
        }
    }
    Ok(out)
}

/// Load and compile the Stages in `paths`.
pub fn load(paths: &[PathBuf], renderer: &Renderer) -> Result<Loaded, ReadError> {
    Ok(load_documents(&read_documents(paths)?, renderer))
}

/// [`load`] over documents already read (for a caller that also reads them itself).
pub fn load_documents(documents: &[Document], renderer: &Renderer) -> Loaded {
    let mut loaded = Loaded::default();
    for (origin, doc) in documents {
        match doc {
            Ok(doc) => {
                let result = load_document(doc, origin.clone(), renderer);
                loaded.add(origin.clone(), result);
            }
            Err(error) => loaded.problems.push(Problem {
                origin: origin.clone(),
                stage: None,
                error: error.clone(),
            }),
        }
    }
    loaded
}

/// Compile one document; `Ok(None)` when it is not a Stage.
pub fn load_document(
    doc: &serde_json::Value,
    origin: Origin,
    renderer: &Renderer,
) -> Result<Option<Stage>, (Option<String>, Vec<FieldError>)> {
    let api_version = doc.get("apiVersion").and_then(|v| v.as_str()).unwrap_or("");
    let kind = doc.get("kind").and_then(|v| v.as_str()).unwrap_or("");
    if kind != v1alpha1::KIND || api_version != v1alpha1::API_VERSION {
        tracing::debug!(%origin, api_version, kind, "skipping a document that is not a Stage");
        return Ok(None);
    }
    let name = doc
        .pointer("/metadata/name")
        .and_then(|v| v.as_str())
        .map(str::to_owned);
    let wire: v1alpha1::Stage = serde_path_to_error::deserialize(doc).map_err(|e| {
        let path = e.path().to_string();
        (name.clone(), vec![FieldError::new(path, e.into_inner())])
    })?;
    compile(&wire, origin, renderer)
        .map(Some)
        .map_err(|errors| (name, errors))
}

/// Load Stages from a YAML string (tests, examples, Stage CRs).
pub fn load_str(text: &str, renderer: &Renderer) -> Result<Loaded, FieldError> {
    let docs = crate::yaml::documents(text).map_err(|e| FieldError::new("<yaml>", e))?;
    let mut loaded = Loaded::default();
    for (document, doc) in docs.iter().enumerate() {
        let origin = Origin {
            file: None,
            document,
        };
        let result = load_document(doc, origin.clone(), renderer);
        loaded.add(origin, result);
    }
    Ok(loaded)
}

/// Whether `path` looks like a manifest file by its extension.
pub fn is_manifest(path: &Path) -> bool {
    matches!(
        path.extension().and_then(|e| e.to_str()),
        Some("yaml" | "yml" | "json")
    )
}
