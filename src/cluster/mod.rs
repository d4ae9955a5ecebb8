//! The API boundary: how kstage reads and writes Kubernetes objects.
//!
//! [`Cluster`] is shaped after what kube-rs offers (watch streams with restarts, typed
//! errors carrying the HTTP status and `Retry-After`, PATCH by content type,
//! subresources), so a kube-rs implementation is a thin adapter. [`store`] is an
//! in-memory store with the API server's write semantics; [`memory::MemoryCluster`] serves
//! it through [`Cluster`], with [`faults`] injected on demand. [`client::KubeCluster`] is
//! the kube-rs implementation, for real clusters and the embedded API server, reading
//! objects as [`raw::RawObject`]s; [`managed`] decides which nodes and pods it hands
//! the engine.

pub mod client;
pub mod event;
pub mod faults;
pub mod labels;
pub mod managed;
pub mod throttle;
pub mod memory;
pub mod store;
pub mod raw;
pub mod rest_metrics;
pub mod validation;

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::sync::mpsc;

use crate::patch::PatchType;
use crate::retry::FailureKind;

/// What a watch reports.
#[derive(Debug, Clone)]
pub enum WatchEvent {
    /// The object was created or changed.
    Applied(Arc<Value>),
    /// The object is gone.
    Deleted(Arc<Value>),
    /// The watch (re)started: these are all the objects; any other is gone.
    Restarted(Vec<Arc<Value>>),
}

/// One write of a patch. The body is owned: an HTTP client serialises it, and the
/// in-memory cluster moves its values into the object instead of copying them.
#[derive(Debug, Clone)]
pub struct PatchRequest<'a> {
    /// Content type.
    pub patch_type: PatchType,
    /// The subresource, `None` for the object itself.
    pub subresource: Option<&'a str>,
    /// The body.
    pub data: Value,
    /// The user to impersonate.
    pub as_user: Option<&'a str>,
}

/// An event to record on an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventRequest {
    /// `Normal` or `Warning`.
    pub event_type: String,
    /// Machine-readable reason.
    pub reason: String,
    /// Human-readable message.
    pub message: String,
    /// The Event's name, derived from what it records (see `engine::job::event_name`): a
    /// second create of the same name is the same Event (AlreadyExists counts as sent),
    /// so a Stage played again after a restart does not emit its events twice. `None`: a
    /// generated name (warnings about the engine's own handling).
    pub name: Option<String>,
    /// The object as the sender saw it (uid, resourceVersion, node), for the Event's
    /// `involvedObject` and `source` (see [`event`]).
    pub involved: event::Involved,
}

/// A failed request, as typed as kube-rs reports it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ClusterError {
    /// How it failed.
    pub kind: FailureKind,
    /// The HTTP status, for [`FailureKind::Http`].
    pub status: Option<u16>,
    /// The `Status` reason (`NotFound`, `Conflict` ...).
    pub reason: Option<String>,
    /// What the server or the transport said.
    pub message: String,
    /// The server's `Retry-After`.
    pub retry_after: Option<Duration>,
}

impl ClusterError {
    /// Whether the object does not exist (404).
    pub fn is_not_found(&self) -> bool {
        self.status == Some(404)
    }
}

impl From<ApiError> for ClusterError {
    fn from(e: ApiError) -> Self {
        let reason = match &e {
            ApiError::NotFound(_) => "NotFound",
            ApiError::AlreadyExists(_) => "AlreadyExists",
            ApiError::Conflict(_) => "Conflict",
            ApiError::Invalid(_) | ApiError::FieldInvalid(_) | ApiError::PatchFailed(_) => {
                "Invalid"
            }
            ApiError::BadRequest(_) => "BadRequest",
            ApiError::UnsupportedMediaType(_) => "UnsupportedMediaType",
            ApiError::Forbidden(_) => "Forbidden",
            ApiError::Unavailable(_) => "ServiceUnavailable",
        };
        Self {
            kind: FailureKind::Http,
            status: Some(e.status()),
            reason: Some(reason.to_owned()),
            message: e.to_string(),
            retry_after: None,
        }
    }
}

/// The API server, as the engine uses it. Every write returns the object as stored
/// afterwards (`None` from [`Cluster::delete`] when it is gone).
pub trait Cluster: Send + Sync + 'static {
    /// Watch the objects of one resource: first a [`WatchEvent::Restarted`] with all of
    /// them, then every change. The channel closes when the cluster goes away.
    fn watch(&self, resource: &ResourceRef) -> mpsc::UnboundedReceiver<WatchEvent>;

    /// Whether a write that changes nothing costs nothing here (no request, no new
    /// resourceVersion), so the engine need not check patches for no-ops before sending
    /// them. False for a real API server, where a no-op PATCH is still a round trip.
    fn cheap_noop_writes(&self) -> bool {
        false
    }

    /// Whether the cluster keeps every object it reports alive until a newer version or
    /// the deletion is reported, so the engine may hold the objects weakly. True for the
    /// in-memory store; false for an API server, whose objects exist in this process only
    /// as the engine holds them.
    fn keeps_objects(&self) -> bool {
        false
    }

    /// Read one object.
    fn get(&self, key: &ObjectKey)
    -> impl Future<Output = Result<Arc<Value>, ClusterError>> + Send;

    /// Create an object.
    fn create(
        &self,
        object: Value,
    ) -> impl Future<Output = Result<Arc<Value>, ClusterError>> + Send;

    /// PATCH an object or its subresource.
    fn patch(
        &self,
        key: &ObjectKey,
        patch: PatchRequest<'_>,
    ) -> impl Future<Output = Result<Arc<Value>, ClusterError>> + Send;

    /// Write a whole object (server-side apply, or a merge/strategic patch of it).
    fn apply(
        &self,
        object: &Value,
        patch_type: PatchType,
        subresource: Option<&str>,
        as_user: Option<&str>,
    ) -> impl Future<Output = Result<Arc<Value>, ClusterError>> + Send;

    /// DELETE an object with the given grace period (`None`: the server's default).
    fn delete(
        &self,
        key: &ObjectKey,
        grace_period_seconds: Option<i64>,
    ) -> impl Future<Output = Result<Option<Arc<Value>>, ClusterError>> + Send;

    /// Record an event about an object.
    fn event(
        &self,
        key: &ObjectKey,
        event: &EventRequest,
    ) -> impl Future<Output = Result<(), ClusterError>> + Send;
}

/// Identifies an object: `apiVersion`, `kind`, namespace (empty for cluster-scoped) and
/// name. Ordered, so iteration over a store is deterministic.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
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
        let top = |field: &str| object.get(field).and_then(Value::as_str);
        Some(Self {
            api_version: top("apiVersion")?.to_owned(),
            kind: top("kind")?.to_owned(),
            namespace: meta_str(object, "namespace").unwrap_or("").to_owned(),
            name: meta_str(object, "name")?.to_owned(),
        })
    }
}

/// `metadata.<field>` of an object, when it is a string. What `Value::pointer` finds,
/// without the two strings it allocates for every step of its path: the engine reads
/// these for every watch event and every write (`pointer` was 4% of its CPU).
pub fn meta_str<'a>(object: &'a Value, field: &str) -> Option<&'a str> {
    object.get("metadata")?.get(field)?.as_str()
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

/// A kind of object: what a Stage applies to (KWOK's `resourceRef`, where `api_group` is
/// a group/version string: `v1`, `apps/v1`, `kwok.x-k8s.io/v1alpha1`), what a watch
/// watches.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResourceRef {
    /// Group/version, `v1` for the core group.
    pub api_group: String,
    /// Kind, e.g. `Pod`.
    pub kind: String,
}

impl ResourceRef {
    /// The resource of an object, from its `apiVersion` and `kind`.
    pub fn of(object: &serde_json::Value) -> Option<Self> {
        Some(Self {
            api_group: object.get("apiVersion")?.as_str()?.to_owned(),
            kind: object.get("kind")?.as_str()?.to_owned(),
        })
    }
}

impl fmt::Display for ResourceRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.api_group, self.kind)
    }
}

/// Follows the objects a watcher of the cluster sees (the engine tells it of every new
/// version and of every object that goes away).
pub trait Observer: Send + Sync + std::fmt::Debug + 'static {
    /// A new version of an object was seen.
    fn applied(&self, object: &Value);
    /// An object went away; `object` is its last state.
    fn gone(&self, object: &Value);
}

/// Whether a write left `object` (the answer to it) released: marked for deletion with
/// no finalizer left and no graceful pod deletion pending. The API server removes such
/// an object on that write and answers with its last state.
pub fn is_released(object: &Value) -> bool {
    let terminating = object.pointer("/metadata/deletionTimestamp").is_some();
    let finalizers_left = object
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| !f.is_empty());
    let graceful_pod_pending = object
        .pointer("/metadata/deletionGracePeriodSeconds")
        .and_then(Value::as_i64)
        .is_some_and(|g| g > 0);
    terminating && !finalizers_left && !graceful_pod_pending
}

/// Whether `api_version` belongs to a group Kubernetes itself serves (the core group, the
/// dotless groups such as `apps`, and `*.k8s.io`), rather than to a custom resource's.
pub fn is_builtin(api_version: &str) -> bool {
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    group.is_empty() || !group.contains('.') || group.ends_with(".k8s.io")
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
            | (
                "flowcontrol.apiserver.k8s.io",
                "FlowSchema" | "PriorityLevelConfiguration"
            )
            | ("kwok.x-k8s.io", "Stage")
    )
}

/// The `Status` reason the API server gives with an HTTP error status.
pub fn status_reason(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        405 => "MethodNotAllowed",
        406 => "NotAcceptable",
        409 => "Conflict",
        410 => "Expired",
        413 => "RequestEntityTooLarge",
        415 => "UnsupportedMediaType",
        422 => "Invalid",
        429 => "TooManyRequests",
        500 => "InternalError",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "Unknown",
    }
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
    /// 422: fields of the object are invalid, as kube-apiserver's field validation
    /// reports them (its `details.causes`).
    #[error("invalid: {0}")]
    FieldInvalid(validation::FieldErrors),
    /// 422: a JSON patch could not be applied (a `test` that failed, a path that is not
    /// there); kube-apiserver answers it without detail, the detail is kept here.
    #[error("the JSON patch could not be applied: {0}")]
    PatchFailed(String),
    /// 400: the request is malformed.
    #[error("bad request: {0}")]
    BadRequest(String),
    /// 415: the patch type is not supported for this resource.
    #[error("unsupported media type {0}")]
    UnsupportedMediaType(String),
    /// 403: the request is not allowed (e.g. content in a terminating namespace).
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// 503: the server does not take writes any more (it is stopping).
    #[error("unavailable: {0}")]
    Unavailable(String),
}

impl ApiError {
    /// The HTTP status the API server answers with.
    pub fn status(&self) -> u16 {
        match self {
            ApiError::NotFound(_) => 404,
            ApiError::AlreadyExists(_) | ApiError::Conflict(_) => 409,
            ApiError::Invalid(_) | ApiError::FieldInvalid(_) | ApiError::PatchFailed(_) => 422,
            ApiError::BadRequest(_) => 400,
            ApiError::UnsupportedMediaType(_) => 415,
            ApiError::Forbidden(_) => 403,
            ApiError::Unavailable(_) => 503,
        }
    }
}
