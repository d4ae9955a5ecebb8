//! The API boundary: how kstage reads and writes Kubernetes objects.
//!
//! [`memory`] is an in-memory store with the API server's write semantics (resource
//! versions, finalizers and `deletionTimestamp`, graceful pod deletion, status
//! subresource rules); the simulator plays Stages against it.

pub mod memory;

use std::fmt;

use serde_json::Value;

/// Identifies an object: `apiVersion`, `kind`, namespace (empty for cluster-scoped) and
/// name. Ordered, so iteration over a store is deterministic.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    /// `apiVersion`, e.g. `v1`.
    pub api_version: String,
    /// `kind`, e.g. `Pod`.
    pub kind: String,
    /// Namespace; empty for cluster-scoped objects.
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl ObjectKey {
    /// The key of an object, if it has `apiVersion`, `kind` and `metadata.name`.
    pub fn of(object: &Value) -> Option<Self> {
        let s = |p: &str| object.pointer(p).and_then(Value::as_str);
        Some(Self {
            api_version: s("/apiVersion")?.to_owned(),
            kind: s("/kind")?.to_owned(),
            namespace: s("/metadata/namespace").unwrap_or("").to_owned(),
            name: s("/metadata/name")?.to_owned(),
        })
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{} {}", self.kind, self.name)
        } else {
            write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
        }
    }
}

/// Whether objects of a built-in kind live in a namespace. Unknown kinds (custom
/// resources) are taken as namespaced unless they carry no namespace.
pub fn is_cluster_scoped(api_version: &str, kind: &str) -> bool {
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    matches!(
        (group, kind),
        (
            "",
            "Node" | "Namespace" | "PersistentVolume" | "ComponentStatus"
        ) | (
            "storage.k8s.io",
            "StorageClass" | "CSIDriver" | "CSINode" | "VolumeAttachment"
        ) | (
            "rbac.authorization.k8s.io",
            "ClusterRole" | "ClusterRoleBinding"
        ) | ("apiextensions.k8s.io", "CustomResourceDefinition")
            | ("scheduling.k8s.io", "PriorityClass")
            | ("kwok.x-k8s.io", "Stage")
    )
}

/// An error as the API server would answer it, with its HTTP status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApiError {
    /// 404: the object does not exist.
    #[error("{0} not found")]
    NotFound(String),
    /// 409: an object with that name exists.
    #[error("{0} already exists")]
    AlreadyExists(String),
    /// 409: the write was based on an old resourceVersion.
    #[error("conflict on {0}: the object has been modified")]
    Conflict(String),
    /// 422: the object or patch is invalid.
    #[error("invalid: {0}")]
    Invalid(String),
    /// 400: the request is malformed.
    #[error("bad request: {0}")]
    BadRequest(String),
    /// 415: the patch type is not supported for this resource.
    #[error("unsupported media type {0}")]
    UnsupportedMediaType(String),
}

impl ApiError {
    /// The HTTP status the API server answers with.
    pub fn status(&self) -> u16 {
        match self {
            ApiError::NotFound(_) => 404,
            ApiError::AlreadyExists(_) | ApiError::Conflict(_) => 409,
            ApiError::Invalid(_) => 422,
            ApiError::BadRequest(_) => 400,
            ApiError::UnsupportedMediaType(_) => 415,
        }
    }
}
