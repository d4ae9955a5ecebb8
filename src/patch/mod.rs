//! Patches: what a Stage's `patch`, `apply` and `finalizers` steps send, and what they
//! do to an object.
//!
//! - [`PatchType`]: the four Kubernetes patch types, their content types and Stage names;
//!   [`default_patch_type`] / [`is_builtin`]: the type of a Stage patch without `type`.
//! - [`wrap_root`]: KWOK's `root` (a patch rendered for one top-level field).
//! - [`apply`] / [`changes`]: a patch applied to an object as JSON, as the API server
//!   would; and whether it would change anything (no-op detection).
//! - [`finalizer_ops`]: KWOK's JSON-patch operations for a `finalizers` step.
//!
//! JSON patch and merge patch use the `json-patch` crate (RFC 6902, RFC 7396). Strategic
//! merge patch is implemented here after `k8s.io/apimachinery/pkg/util/strategicpatch`,
//! with a table of the merge keys of built-in kinds:
//!
//! | field (type)                                                        | strategy             | source (Go struct tag)                               |
//! |---------------------------------------------------------------------|----------------------|------------------------------------------------------|
//! | `metadata.ownerReferences` (every kind)                              | merge by `uid`       | `ObjectMeta`, `patchMergeKey:"uid"`                  |
//! | `metadata.finalizers` (every kind)                                   | set                  | `ObjectMeta`, `patchStrategy:"merge"`                |
//! | `spec.containers`, `spec.initContainers`, `spec.ephemeralContainers` | merge by `name`      | `PodSpec`                                            |
//! | `spec.volumes`, `spec.resourceClaims`                                | merge by `name`      | `PodSpec`, `patchStrategy:"merge,retainKeys"`        |
//! | `spec.imagePullSecrets`, `spec.schedulingGates`                      | merge by `name`      | `PodSpec`                                            |
//! | `spec.hostAliases`                                                   | merge by `ip`        | `PodSpec`                                            |
//! | `spec.topologySpreadConstraints`                                     | merge by `topologyKey` | `PodSpec`                                          |
//! | `spec.tolerations`, `spec.readinessGates`                            | replace              | `PodSpec`, `+listType=atomic`, no strategy           |
//! | container `ports`                                                    | merge by `containerPort` | `Container`                                      |
//! | container `env`                                                      | merge by `name`      | `Container`                                          |
//! | container `volumeMounts`                                             | merge by `mountPath` | `Container`                                          |
//! | container `volumeDevices`                                            | merge by `devicePath` | `Container`                                         |
//! | container `envFrom`, `command`, `args`, `resizePolicy`               | replace              | `Container`, `+listType=atomic`                      |
//! | Pod `status.conditions`                                              | merge by `type`      | `PodStatus`                                          |
//! | Pod `status.podIPs`, `status.hostIPs`                                | merge by `ip`        | `PodStatus`                                          |
//! | Pod `status.resourceClaimStatuses`                                   | merge by `name`      | `PodStatus`                                          |
//! | Pod `status.containerStatuses`, `initContainerStatuses`, `ephemeralContainerStatuses` | replace | `PodStatus`, `+listType=atomic`, no strategy |
//! | Node `spec.podCIDRs`                                                 | set                  | `NodeSpec`, `patchStrategy:"merge"`                  |
//! | Node `spec.taints`                                                   | replace              | `NodeSpec`, `+listType=atomic`                       |
//! | Node `status.conditions`, `status.addresses`                         | merge by `type`      | `NodeStatus`                                         |
//! | Node `status.images`, `volumesInUse`, `volumesAttached`              | replace              | `NodeStatus`, `+listType=atomic`                     |
//! | Service `spec.ports`                                                 | merge by `port`      | `ServiceSpec`                                        |
//! | `status.conditions` of Service, Deployment, ReplicaSet, StatefulSet, DaemonSet, Job, ReplicationController, Namespace, PersistentVolumeClaim | merge by `type` | their `*Status` types |
//!
//! The pod template of Deployment, ReplicaSet, StatefulSet, DaemonSet, Job,
//! ReplicationController (`spec.template`), CronJob (`spec.jobTemplate.spec.template`)
//! and PodTemplate (`template`) has the Pod rules. Any other field is a map that merges
//! or a list that is replaced, for every kind, custom resources included.
//!
//! Simplifications: `Apply` (server-side apply) is applied as a strategic merge of the
//! applied object (so custom resources get merge-patch rules, and lists merge by the
//! strategic merge key rather than by all the `listMapKey`s); there are no managed
//! fields, so fields the applied object omits are kept, never removed.
//!
//! Strategic merge follows Kubernetes (`mergeMap`, `mergeSlice`, `normalizeElementOrder`),
//! including its list order: the items a patch names keep the patch's order, and an item
//! of the object goes before a patched item only if it was before it in the object, so
//! an added item lands right after the patch's items before it (first, if it is the
//! patch's first item). Where it differs, on purpose:
//!
//! - values the patch brings in whole (a new key, a replaced list or map) are stored
//!   without `null`s and without directive keys; Kubernetes keeps them in the JSON and
//!   relies on decoding into Go structs to drop them;
//! - `$patch: delete` on a map removes the key (as the documentation says) where the Go
//!   code leaves `{}`;
//! - `$patch: merge` in a map is accepted as "merge as usual" (Kubernetes rejects it);
//! - `$deleteFromPrimitiveList/<list>` against an object without that list does nothing
//!   (Kubernetes stores the deletion list as the list), and it deletes from the list
//!   whatever the list's declared strategy;
//! - `$deleteFromPrimitiveList` is applied after the patch's other keys of the same map,
//!   in one fixed order (Kubernetes iterates a Go map).

mod error;
mod finalizers;
mod json;
mod merge;
mod schema;
mod strategic;

use serde_json::{Map, Value};

pub use error::{PatchError, StrategicError};
pub use finalizers::{FinalizerChange, finalizer_ops};

/// The type of a patch, as Kubernetes names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PatchType {
    /// JSON patch, RFC 6902: a list of operations.
    Json,
    /// JSON merge patch, RFC 7396: a partial object; lists are replaced.
    Merge,
    /// Kubernetes strategic merge patch: a partial object; lists merge by key.
    Strategic,
    /// Server-side apply: a whole (partial) object owned by a field manager.
    Apply,
}

impl PatchType {
    /// The `Content-Type` of a PATCH request of this type.
    pub fn content_type(self) -> &'static str {
        match self {
            Self::Json => "application/json-patch+json",
            Self::Merge => "application/merge-patch+json",
            Self::Strategic => "application/strategic-merge-patch+json",
            Self::Apply => "application/apply-patch+yaml",
        }
    }

    /// The type of a Stage's `type` field: `json`, `merge`, `strategic` or `apply`.
    pub fn from_stage_name(s: &str) -> Option<Self> {
        match s {
            "json" => Some(Self::Json),
            "merge" => Some(Self::Merge),
            "strategic" => Some(Self::Strategic),
            "apply" => Some(Self::Apply),
            _ => None,
        }
    }

    /// The name of this type in a Stage's `type` field.
    pub fn stage_name(self) -> &'static str {
        match self {
            Self::Json => "json",
            Self::Merge => "merge",
            Self::Strategic => "strategic",
            Self::Apply => "apply",
        }
    }

    /// The type of a request's `Content-Type`; parameters (`; charset=utf-8`) and case
    /// are ignored.
    pub fn from_content_type(s: &str) -> Option<Self> {
        let media_type = s.split(';').next().unwrap_or_default().trim();
        [Self::Json, Self::Merge, Self::Strategic, Self::Apply]
            .into_iter()
            .find(|patch_type| patch_type.content_type().eq_ignore_ascii_case(media_type))
    }
}

impl std::fmt::Display for PatchType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.stage_name())
    }
}

/// The patch type of a Stage patch without `type`: strategic for built-in Kubernetes
/// kinds, merge for custom resources.
///
/// KWOK itself picks strategic only for Pods and Nodes (the kinds it watches with typed
/// clients) and merge for every other kind; the two differ only for lists with a merge
/// key (e.g. `status.conditions` of a Deployment) that a template sets partially.
pub fn default_patch_type(api_group: &str, kind: &str) -> PatchType {
    if is_builtin(api_group, kind) {
        PatchType::Strategic
    } else {
        PatchType::Merge
    }
}

/// Whether `kind` of `api_group` (KWOK's group/version, e.g. `v1`, `apps/v1`) is built
/// into Kubernetes, i.e. served by a stock API server, which accepts strategic merge
/// patches for it.
///
/// The decision is by group (every kind of a built-in group is built in); the table is
/// in `schema.rs`: core, `apps`, `batch`, `autoscaling`, `policy`, `coordination.k8s.io`,
/// `storage.k8s.io`, `events.k8s.io`, `networking.k8s.io`, `rbac.authorization.k8s.io`,
/// `discovery.k8s.io`, `node.k8s.io`, `scheduling.k8s.io`, `certificates.k8s.io`,
/// `admissionregistration.k8s.io`, `apiextensions.k8s.io`, `apiregistration.k8s.io`,
/// `flowcontrol.apiserver.k8s.io`, `resource.k8s.io`, `authentication.k8s.io`,
/// `authorization.k8s.io`, `internal.apiserver.k8s.io`, `storagemigration.k8s.io`,
/// `extensions`.
pub fn is_builtin(api_group: &str, kind: &str) -> bool {
    // The kind is not needed today: no built-in group serves custom kinds.
    let _ = kind;
    schema::BUILTIN_GROUPS.contains(&schema::group_of(api_group))
}

/// KWOK's `root`: the rendered patch is for the top-level field `root` of the object.
///
/// Merge, strategic and apply patches become `{root: rendered}`; every operation of a
/// JSON patch gets `/<root>` prefixed to its `path` and `from` (KWOK prefixes `path`
/// only, which breaks `move` and `copy`). `root` is escaped as a JSON-pointer token.
/// `None` or `""` returns `rendered` unchanged.
pub fn wrap_root(
    root: Option<&str>,
    patch_type: PatchType,
    rendered: Value,
) -> Result<Value, PatchError> {
    let root = match root {
        None | Some("") => return Ok(rendered),
        Some(root) => root,
    };
    match patch_type {
        PatchType::Json => json::wrap_root(root, rendered),
        PatchType::Merge | PatchType::Strategic | PatchType::Apply => {
            let mut wrapped = Map::new();
            wrapped.insert(root.to_owned(), rendered);
            Ok(Value::Object(wrapped))
        }
    }
}

/// Apply `patch` of `patch_type` to `target`, an object of `kind` (strategic merge needs
/// the kind for its merge keys), as the API server would; `target` is not modified.
///
/// A `null` target is taken as `{}`. Merge, strategic and apply patches must be objects.
pub fn apply(
    target: &Value,
    patch_type: PatchType,
    patch: &Value,
    kind: &str,
) -> Result<Value, PatchError> {
    if patch_type == PatchType::Json {
        return json::apply(target, patch);
    }
    check_target(target)?;
    apply_owned(target.clone(), patch_type, patch, kind)
}

/// [`apply`] to a target the caller gives up, saving a copy of it.
pub fn apply_owned(
    target: Value,
    patch_type: PatchType,
    patch: &Value,
    kind: &str,
) -> Result<Value, PatchError> {
    if patch_type == PatchType::Json {
        return json::apply(&target, patch);
    }
    let patch = object_patch(patch_type, patch)?;
    check_target(&target)?;
    let target = match target {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    match patch_type {
        PatchType::Merge => Ok(merge::apply(Value::Object(target), patch)),
        PatchType::Json | PatchType::Strategic | PatchType::Apply => {
            strategic::apply(target, patch, kind).map(Value::Object)
        }
    }
}

/// [`apply`] to a target and with a patch the caller both give up: besides the copy of
/// the target, the values the patch brings in are moved into the object rather than
/// copied. Same result as [`apply_owned`].
pub fn apply_owned_patch(
    target: Value,
    patch_type: PatchType,
    patch: Value,
    kind: &str,
) -> Result<Value, PatchError> {
    let patch = match (patch_type, patch) {
        (PatchType::Strategic | PatchType::Apply, Value::Object(patch)) => patch,
        (_, patch) => return apply_owned(target, patch_type, &patch, kind),
    };
    check_target(&target)?;
    let target = match target {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    strategic::apply_owned(target, patch, kind).map(Value::Object)
}

/// Whether applying `patch` to `target` would change it: `false` exactly when
/// [`apply`] returns `target` unchanged. A patch that fails (e.g. a JSON-patch `test`
/// that does not hold) is an error, not "no change".
pub fn changes(
    target: &Value,
    patch_type: PatchType,
    patch: &Value,
    kind: &str,
) -> Result<bool, PatchError> {
    if patch_type == PatchType::Merge {
        let patch = object_patch(patch_type, patch)?;
        check_target(target)?;
        return Ok(merge::changes(target, patch));
    }
    Ok(apply(target, patch_type, patch, kind)? != *target)
}

/// The object of a merge, strategic or apply patch.
fn object_patch(patch_type: PatchType, patch: &Value) -> Result<&Map<String, Value>, PatchError> {
    patch.as_object().ok_or_else(|| PatchError::NotAnObject {
        patch_type,
        found: json::json_type(patch),
    })
}

/// The object to patch must be an object (or `null`).
fn check_target(target: &Value) -> Result<(), PatchError> {
    match target {
        Value::Object(_) | Value::Null => Ok(()),
        other => Err(PatchError::TargetNotAnObject {
            found: json::json_type(other),
        }),
    }
}

#[cfg(test)]
#[expect(
    clippy::unwrap_used,
    reason = "a test fails loudly on an unexpected error"
)]
mod tests;
