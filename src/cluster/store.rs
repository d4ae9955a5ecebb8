//! An in-memory object store with the write semantics of the Kubernetes API server that
//! Stages rely on: one global resourceVersion counter, `uid`, `creationTimestamp`,
//! `generation`, finalizers and `deletionTimestamp`, graceful deletion of pods bound to a
//! node, status subresource rules, and pod defaulting (`status.phase: Pending`).
//!
//! It is synchronous and single-threaded; the simulator owns one. Identifiers are
//! derived from counters, so a run is reproducible.

use std::collections::{BTreeMap, HashMap};
use std::ops::Bound;
use std::sync::Arc;

use chrono::{DateTime, TimeDelta, Utc};
use serde_json::{Map, Value, json};

use super::validation::{self, FieldError, FieldErrors};
use super::{ApiError, ObjectKey, is_cluster_scoped};
use crate::clock::Clock;
use crate::patch::{self, PatchType};

/// The outcome of a write.
#[derive(Debug, Clone, PartialEq)]
pub enum Written {
    /// The object as stored after the write; `changed` is false for a no-op write
    /// (the API server does not bump resourceVersion then).
    Stored {
        /// The stored object.
        object: Arc<Value>,
        /// Whether anything changed.
        changed: bool,
    },
    /// The write removed the object (its last finalizer went while it was being deleted).
    Removed(Arc<Value>),
}

/// The outcome of a delete.
#[derive(Debug, Clone, PartialEq)]
pub enum Deleted {
    /// The object is gone.
    Removed(Arc<Value>),
    /// The object is marked for deletion (finalizers, or a graceful pod deletion) and
    /// stays until its finalizers are gone or it is deleted with grace period 0.
    Terminating {
        /// The object as stored.
        object: Arc<Value>,
        /// Whether this call marked it (false if it already was).
        changed: bool,
    },
}

/// The store.
#[derive(Debug)]
pub struct MemoryStore {
    /// Objects are shared, so a reader keeps its snapshot while the store moves on.
    objects: BTreeMap<ObjectKey, Arc<Value>>,
    resource_version: u64,
    uids: u64,
    clock: Arc<dyn Clock>,
    /// Custom kinds (`apiVersion`, `kind`) as their CustomResourceDefinitions declare
    /// them.
    custom: HashMap<(String, String), CustomKind>,
}

/// What the store must know of a custom kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CustomKind {
    /// Objects live in namespaces.
    pub namespaced: bool,
    /// Served with a status subresource.
    pub status: bool,
}

/// Kubernetes' timestamp format (RFC 3339, seconds, `Z`).
pub fn timestamp(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

impl MemoryStore {
    /// An empty store whose timestamps come from `clock`.
    pub fn new(clock: Arc<dyn Clock>) -> Self {
        Self {
            objects: BTreeMap::new(),
            resource_version: 0,
            uids: 0,
            clock,
            custom: HashMap::new(),
        }
    }

    /// Declare a custom kind (`Some`) as its CustomResourceDefinition says, or forget it
    /// (`None`): its scope decides `metadata.namespace`, and with a status subresource
    /// status and main writes follow the rules of built-in kinds with a status. An
    /// undeclared kind is namespaced without a status subresource.
    pub fn set_custom_kind(&mut self, api_version: &str, kind: &str, traits: Option<CustomKind>) {
        let k = (api_version.to_owned(), kind.to_owned());
        match traits {
            Some(t) => self.custom.insert(k, t),
            None => self.custom.remove(&k),
        };
    }

    fn custom_kind(&self, api_version: &str, kind: &str) -> Option<CustomKind> {
        self.custom
            .get(&(api_version.to_owned(), kind.to_owned()))
            .copied()
    }

    /// Whether objects of a kind have a status subresource.
    pub fn has_status_subresource(&self, api_version: &str, kind: &str) -> bool {
        match self.custom_kind(api_version, kind) {
            Some(custom) => custom.status,
            None => has_status_subresource(api_version, kind),
        }
    }

    /// Whether objects of a kind live outside namespaces.
    pub fn is_cluster_scoped(&self, api_version: &str, kind: &str) -> bool {
        match self.custom_kind(api_version, kind) {
            Some(custom) => !custom.namespaced,
            None => is_cluster_scoped(api_version, kind),
        }
    }

    /// The objects of one kind, in one namespace or all (`None`), ordered by key, from
    /// the first key after `after` when given (for paging). Only the kind's own range
    /// of the store is visited.
    pub fn range<'a>(
        &'a self,
        api_version: &str,
        kind: &str,
        namespace: Option<&str>,
        after: Option<&ObjectKey>,
    ) -> impl Iterator<Item = (&'a ObjectKey, &'a Arc<Value>)> + 'a {
        let start = ObjectKey {
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
            namespace: namespace.unwrap_or("").to_owned(),
            name: String::new(),
        };
        let lower = match after {
            Some(after) if *after >= start => Bound::Excluded(after.clone()),
            _ => Bound::Included(start.clone()),
        };
        let one_namespace = namespace.is_some();
        self.objects
            .range((lower, Bound::Unbounded))
            .take_while(move |(k, _)| {
                k.api_version == start.api_version
                    && k.kind == start.kind
                    && (!one_namespace || k.namespace == start.namespace)
            })
    }

    /// The number of objects.
    pub fn len(&self) -> usize {
        self.objects.len()
    }

    /// Whether the store is empty.
    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }

    /// One object.
    pub fn get(&self, key: &ObjectKey) -> Option<&Arc<Value>> {
        self.objects.get(key)
    }

    /// Every object, ordered by key.
    pub fn iter(&self) -> impl Iterator<Item = (&ObjectKey, &Arc<Value>)> {
        self.objects.iter()
    }

    /// Every object, ordered by key, consuming the store.
    pub fn into_objects(self) -> impl Iterator<Item = Value> {
        self.objects.into_values().map(Arc::unwrap_or_clone)
    }

    /// The last resourceVersion handed out.
    pub fn resource_version(&self) -> u64 {
        self.resource_version
    }

    /// How many uids were handed out.
    pub fn uids(&self) -> u64 {
        self.uids
    }

    /// Put `object` back under `key` as it was stored (restoring a snapshot).
    pub fn restore(&mut self, key: ObjectKey, object: Value) {
        self.objects.insert(key, Arc::new(object));
    }

    /// Go on from a snapshot's counters (never below what the objects carry).
    pub fn restore_counters(&mut self, resource_version: u64, uids: u64) {
        let highest = self
            .objects
            .values()
            .filter_map(|o| {
                o.pointer("/metadata/resourceVersion")?
                    .as_str()?
                    .parse()
                    .ok()
            })
            .max()
            .unwrap_or(0);
        self.resource_version = resource_version.max(highest);
        self.uids = uids.max(self.objects.len() as u64);
    }

    fn next_rv(&mut self) -> String {
        self.resource_version += 1;
        self.resource_version.to_string()
    }

    /// Create an object, filling in what the API server fills in. `generateName` is
    /// honoured; a missing namespace on a namespaced kind becomes `default`.
    pub fn create(&mut self, mut object: Value) -> Result<Arc<Value>, ApiError> {
        let Some(map) = object.as_object_mut() else {
            return Err(ApiError::BadRequest(
                "the object is not a JSON object".into(),
            ));
        };
        for field in ["apiVersion", "kind"] {
            if text(map, field).is_empty() {
                return Err(ApiError::BadRequest(format!("{field} is required")));
            }
        }
        let meta = map.entry("metadata").or_insert_with(|| json!({}));
        let Some(meta) = meta.as_object_mut() else {
            return Err(ApiError::BadRequest("metadata is not an object".into()));
        };
        if text(meta, "name").is_empty() {
            match meta.get("generateName").and_then(Value::as_str) {
                Some(prefix) if !prefix.is_empty() => {
                    let name = format!("{prefix}{}", generated_suffix(self.uids + 1));
                    meta.insert("name".into(), json!(name));
                }
                _ => {
                    return Err(invalid(vec![FieldError::required(
                        "metadata.name",
                        "name or generateName is required",
                    )]));
                }
            }
        }
        self.default_namespace(&mut object);
        let key = ObjectKey::of(&object)
            .ok_or_else(|| ApiError::BadRequest("object has no name".into()))?;
        let errors = validation::object(&key, &object);
        if !errors.is_empty() {
            return Err(invalid(errors));
        }
        if self.objects.contains_key(&key) {
            return Err(ApiError::AlreadyExists(key.to_string()));
        }
        self.uids += 1;
        let uid = pseudo_uuid(self.uids);
        let now = timestamp(self.clock.now());
        let rv = self.next_rv();
        if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert("uid".into(), json!(uid));
            meta.insert("resourceVersion".into(), json!(rv));
            meta.insert("creationTimestamp".into(), json!(now));
            if tracks_generation(&key) {
                meta.insert("generation".into(), json!(1));
            }
            meta.remove("deletionTimestamp");
        }
        // A custom resource served with a status subresource takes its status only
        // through `/status`: kube-apiserver drops the one a create carries.
        if self
            .custom_kind(&key.api_version, &key.kind)
            .is_some_and(|c| c.status)
            && let Some(map) = object.as_object_mut()
        {
            map.remove("status");
        }
        if key.api_version == "v1" {
            match key.kind.as_str() {
                "Pod" => default_status(&mut object, "Pending"),
                "Namespace" => default_status(&mut object, "Active"),
                _ => {}
            }
        }
        let object = Arc::new(object);
        self.objects.insert(key, object.clone());
        Ok(object)
    }

    /// PATCH an object or its subresource.
    pub fn patch(
        &mut self,
        key: &ObjectKey,
        patch_type: PatchType,
        subresource: Option<&str>,
        data: Value,
    ) -> Result<Written, ApiError> {
        let old = self
            .objects
            .get(key)
            .ok_or_else(|| ApiError::NotFound(key.to_string()))?;
        let invalid = |e: patch::PatchError| match patch_type {
            PatchType::Json => ApiError::PatchFailed(e.to_string()),
            _ => ApiError::Invalid(e.to_string()),
        };
        let status_only = patch_type != PatchType::Json
            && data
                .as_object()
                .is_some_and(|m| m.keys().all(|k| k == "status"));
        let new = match subresource {
            // The common case, a patch of the status alone: patch the status by itself and
            // move the stored object into its next version instead of copying it.
            Some("status") if status_only => {
                let status = old.get("status").cloned().unwrap_or(Value::Null);
                let view = Value::Object(Map::from_iter([("status".to_owned(), status)]));
                let patched =
                    patch::apply_owned_patch(view, patch_type, data, &key.kind).map_err(invalid)?;
                let status = match patched {
                    Value::Object(mut map) => map.remove("status").filter(|s| !s.is_null()),
                    _ => None,
                };
                if status.as_ref() == old.get("status") {
                    return Ok(Written::Stored {
                        object: old.clone(),
                        changed: false,
                    });
                }
                let old = self.objects.remove(key).unwrap_or_default();
                // The old version may still be held elsewhere (a watcher's cache): then
                // copy everything but the status, which is replaced anyway.
                let mut new = match Arc::try_unwrap(old) {
                    Ok(owned) => owned,
                    Err(shared) => match &*shared {
                        Value::Object(map) => Value::Object(
                            map.iter()
                                .filter(|(k, _)| *k != "status")
                                .map(|(k, v)| (k.clone(), v.clone()))
                                .collect(),
                        ),
                        other => other.clone(),
                    },
                };
                if let Some(map) = new.as_object_mut() {
                    match status {
                        Some(status) => map.insert("status".into(), status),
                        None => map.remove("status"),
                    };
                }
                return Ok(self.store_version(key.clone(), new));
            }
            Some("status") => {
                let patched = patch::apply(old, patch_type, &data, &key.kind).map_err(invalid)?;
                status_write(old, &patched)
            }
            _ => {
                let patched = patch::apply(old, patch_type, &data, &key.kind).map_err(invalid)?;
                check_pod_cidrs(old, &patched, key)?;
                self.main_write(old, patched, key)
            }
        };
        self.commit(key, new, Enforce::ClientWrite)
    }

    /// PUT: replace an object (or, with subresource `status`, its status). A
    /// `metadata.resourceVersion` in `object` must be the stored one (409 Conflict
    /// otherwise); without one the update is unconditional.
    pub fn update(
        &mut self,
        key: &ObjectKey,
        object: Value,
        subresource: Option<&str>,
    ) -> Result<Written, ApiError> {
        let old = self
            .objects
            .get(key)
            .ok_or_else(|| ApiError::NotFound(key.to_string()))?;
        check_resource_version(old, &object, key)?;
        let new = match subresource {
            Some("status") => status_write(old, &object),
            Some(other) => {
                return Err(ApiError::NotFound(format!("{key} subresource {other}")));
            }
            None => {
                check_pod_cidrs(old, &object, key)?;
                self.main_write(old, object, key)
            }
        };
        self.commit(key, new, Enforce::ClientWrite)
    }

    /// Write a whole object: create it if it does not exist (unless a subresource is
    /// named), else merge it onto the stored one by `patch_type` (last writer wins: no
    /// managed fields).
    pub fn apply(
        &mut self,
        object: &Value,
        patch_type: PatchType,
        subresource: Option<&str>,
    ) -> Result<Written, ApiError> {
        let mut object = object.clone();
        self.default_namespace(&mut object);
        let key = ObjectKey::of(&object).ok_or_else(|| {
            ApiError::BadRequest("applied object has no apiVersion, kind or name".into())
        })?;
        if !self.objects.contains_key(&key) {
            if subresource.is_some() {
                return Err(ApiError::NotFound(key.to_string()));
            }
            let created = self.create(object)?;
            return Ok(Written::Stored {
                object: created,
                changed: true,
            });
        }
        let as_patch = match patch_type {
            PatchType::Json => {
                return Err(ApiError::UnsupportedMediaType(
                    PatchType::Json.content_type().into(),
                ));
            }
            other => other,
        };
        self.patch(&key, as_patch, subresource, object)
    }

    /// DELETE an object. With `grace_period_seconds` `None`, a pod bound to a node is
    /// only marked (deletionTimestamp = now + its termination grace period), as the API
    /// server does while the kubelet stops it; `Some(0)` removes it. An object with
    /// finalizers is marked and stays until they are gone.
    pub fn delete(
        &mut self,
        key: &ObjectKey,
        grace_period_seconds: Option<i64>,
    ) -> Result<Deleted, ApiError> {
        let old = self
            .objects
            .get(key)
            .ok_or_else(|| ApiError::NotFound(key.to_string()))?;
        let now = self.clock.now();
        let bound_pod = key.kind == "Pod"
            && key.api_version == "v1"
            && old
                .pointer("/spec/nodeName")
                .and_then(Value::as_str)
                .is_some_and(|n| !n.is_empty());
        let grace = match grace_period_seconds {
            Some(g) => g.max(0),
            None if bound_pod => old
                .pointer("/spec/terminationGracePeriodSeconds")
                .and_then(Value::as_i64)
                .unwrap_or(30)
                .max(0),
            None => 0,
        };
        let has_finalizers = old
            .pointer("/metadata/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|f| !f.is_empty());
        if !has_finalizers && (grace == 0 || !bound_pod) {
            let mut removed = self
                .objects
                .remove(key)
                .unwrap_or_else(|| Arc::new(Value::Null));
            self.resource_version += 1;
            // Pods are deleted gracefully even at grace 0: kube-apiserver stamps the
            // deletion (now, grace 0) on the last state it answers with and sends.
            if key.kind == "Pod" && key.api_version == "v1" {
                let object = Arc::make_mut(&mut removed);
                if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
                    meta.insert("deletionTimestamp".into(), json!(timestamp(now)));
                    meta.insert("deletionGracePeriodSeconds".into(), json!(0));
                }
            }
            return Ok(Deleted::Removed(removed));
        }
        let already = old.pointer("/metadata/deletionTimestamp").is_some();
        let old_grace = old
            .pointer("/metadata/deletionGracePeriodSeconds")
            .and_then(Value::as_i64);
        // A shorter grace period moves the deletion forward; a longer one never delays it.
        if already && old_grace.is_some_and(|g| g <= grace) {
            return Ok(Deleted::Terminating {
                object: old.clone(),
                changed: false,
            });
        }
        let mut new = Value::clone(old);
        if let Some(meta) = new.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert(
                "deletionTimestamp".into(),
                json!(timestamp(now + TimeDelta::seconds(grace))),
            );
            meta.insert("deletionGracePeriodSeconds".into(), json!(grace));
        }
        match self.commit(key, new, Enforce::ServerWrite)? {
            Written::Stored { object, changed } => Ok(Deleted::Terminating { object, changed }),
            Written::Removed(object) => Ok(Deleted::Removed(object)),
        }
    }

    /// Store `new` as the next version of `key`; a client write cannot change what the
    /// server owns (identity, timestamps, deletion state), nor write metadata the API
    /// server refuses (checked only when it changes, so status writes cost nothing more).
    fn commit(
        &mut self,
        key: &ObjectKey,
        mut new: Value,
        enforce: Enforce,
    ) -> Result<Written, ApiError> {
        let Some(old) = self.objects.get(key) else {
            return Ok(Written::Removed(Arc::new(new)));
        };
        if enforce == Enforce::ClientWrite {
            restore_immutable(old, &mut new);
            let namespace_spec = key.kind == "Namespace" && new.get("spec") != old.get("spec");
            if new.get("metadata") != old.get("metadata") || namespace_spec {
                let errors = validation::object(key, &new);
                if !errors.is_empty() {
                    return Err(invalid(errors));
                }
            }
        }
        if new == **old {
            return Ok(Written::Stored {
                object: old.clone(),
                changed: false,
            });
        }
        if new.get("spec") != old.get("spec") && tracks_generation(key) {
            let generation = old
                .pointer("/metadata/generation")
                .and_then(Value::as_i64)
                .unwrap_or(1);
            if let Some(meta) = new.get_mut("metadata").and_then(Value::as_object_mut) {
                meta.insert("generation".into(), json!(generation + 1));
            }
        }
        Ok(self.store_version(key.clone(), new))
    }

    /// Store a changed object under a new resourceVersion (or remove it, if it is being
    /// deleted and nothing holds it any more).
    fn store_version(&mut self, key: ObjectKey, mut new: Value) -> Written {
        let released = super::is_released(&new);
        let rv = self.next_rv();
        if let Some(meta) = new.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert("resourceVersion".into(), json!(rv));
        }
        let new = Arc::new(new);
        if released {
            self.objects.remove(&key);
            return Written::Removed(new);
        }
        self.objects.insert(key, new.clone());
        Written::Stored {
            object: new,
            changed: true,
        }
    }
}

/// Who is writing: a client (whose changes to server-owned fields are dropped) or the
/// store itself (marking an object for deletion).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Enforce {
    ClientWrite,
    ServerWrite,
}

/// A string field of a map; `""` when missing or not a string.
fn text<'a>(map: &'a Map<String, Value>, field: &str) -> &'a str {
    map.get(field).and_then(Value::as_str).unwrap_or("")
}

impl MemoryStore {
    /// What the API server does with `metadata.namespace`: dropped for cluster-scoped
    /// kinds, `default` when a namespaced object has none.
    fn default_namespace(&self, object: &mut Value) {
        let Some(map) = object.as_object_mut() else {
            return;
        };
        let cluster_scoped = self.is_cluster_scoped(text(map, "apiVersion"), text(map, "kind"));
        set_namespace(map, cluster_scoped);
    }
}

fn set_namespace(map: &mut Map<String, Value>, cluster_scoped: bool) {
    let Some(meta) = map.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    if cluster_scoped {
        meta.remove("namespace");
    } else if text(meta, "namespace").is_empty() {
        meta.insert("namespace".into(), json!("default"));
    }
}

/// A status write keeps everything of the stored object but its status (and labels and
/// annotations, which the API server also takes from status writes).
fn status_write(old: &Value, patched: &Value) -> Value {
    let mut new = old.clone();
    let Some(map) = new.as_object_mut() else {
        return new;
    };
    match patched.get("status") {
        Some(status) => {
            map.insert("status".into(), status.clone());
        }
        None => {
            map.remove("status");
        }
    }
    for field in ["labels", "annotations"] {
        let value = patched.pointer(&format!("/metadata/{field}")).cloned();
        if let Some(meta) = map.get_mut("metadata").and_then(Value::as_object_mut) {
            match value {
                Some(v) => meta.insert(field.into(), v),
                None => meta.remove(field),
            };
        }
    }
    new
}

impl MemoryStore {
    /// A write to the object itself ignores status for kinds that have a status
    /// subresource.
    fn main_write(&self, old: &Value, mut patched: Value, key: &ObjectKey) -> Value {
        if self.has_status_subresource(&key.api_version, &key.kind)
            && let Some(map) = patched.as_object_mut()
        {
            match old.get("status") {
                Some(status) => map.insert("status".into(), status.clone()),
                None => map.remove("status"),
            };
        }
        patched
    }
}

/// kube-apiserver's rule for a node's pod ranges: `spec.podCIDRs` (`podCIDR`) may go
/// from none to some (as the node IPAM controller sets them), never change after.
fn check_pod_cidrs(old: &Value, new: &Value, key: &ObjectKey) -> Result<(), ApiError> {
    if key.api_version != "v1" || key.kind != "Node" {
        return Ok(());
    }
    let cidrs = |node: &Value| -> Vec<Value> {
        match node.pointer("/spec/podCIDRs").and_then(Value::as_array) {
            Some(list) if !list.is_empty() => list.clone(),
            _ => node.pointer("/spec/podCIDR").cloned().into_iter().collect(),
        }
    };
    let before = cidrs(old);
    if before.is_empty() || before == cidrs(new) {
        return Ok(());
    }
    Err(pod_cidrs_forbidden())
}

/// kube-apiserver's 422 for a change of a node's pod ranges.
fn pod_cidrs_forbidden() -> ApiError {
    ApiError::FieldInvalid(FieldErrors(vec![FieldError {
        field: "spec.podCIDRs",
        reason: "FieldValueForbidden",
        message: "Forbidden: node updates may not change podCIDR except from \"\" to valid".into(),
    }]))
}

/// The optimistic-concurrency check of a write: a `metadata.resourceVersion` it carries
/// must be the stored one.
pub fn check_resource_version(
    stored: &Value,
    write: &Value,
    key: &ObjectKey,
) -> Result<(), ApiError> {
    let wanted = write
        .pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .filter(|rv| !rv.is_empty());
    match wanted {
        Some(rv)
            if Some(rv)
                != stored
                    .pointer("/metadata/resourceVersion")
                    .and_then(Value::as_str) =>
        {
            Err(ApiError::Conflict(key.to_string()))
        }
        _ => Ok(()),
    }
}

/// Built-in kinds served with a status subresource.
fn has_status_subresource(api_version: &str, kind: &str) -> bool {
    patch::is_builtin(api_version, kind)
        && !matches!(
            kind,
            "ConfigMap"
                | "Secret"
                | "Event"
                | "Lease"
                | "ServiceAccount"
                | "StorageClass"
                | "Role"
                | "RoleBinding"
                | "ClusterRole"
                | "ClusterRoleBinding"
                | "Endpoints"
                | "PriorityClass"
        )
}

fn restore_immutable(old: &Value, new: &mut Value) {
    for field in ["apiVersion", "kind"] {
        if let (Some(v), Some(map)) = (old.get(field), new.as_object_mut()) {
            map.insert(field.into(), v.clone());
        }
    }
    if !new.get("metadata").is_some_and(Value::is_object)
        && let Some(map) = new.as_object_mut()
    {
        map.insert("metadata".into(), json!({}));
    }
    let Some(meta) = new.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    for field in [
        "name",
        "namespace",
        "uid",
        "creationTimestamp",
        "resourceVersion",
        "generation",
        "deletionGracePeriodSeconds",
    ] {
        match old.pointer(&format!("/metadata/{field}")) {
            Some(v) => meta.insert(field.into(), v.clone()),
            None => meta.remove(field),
        };
    }
    // Once set, deletionTimestamp cannot be unset or moved by a write.
    if let Some(ts) = old.pointer("/metadata/deletionTimestamp") {
        meta.insert("deletionTimestamp".into(), ts.clone());
    } else {
        meta.remove("deletionTimestamp");
    }
}

/// Whether kube-apiserver keeps `metadata.generation` for this kind: every kind but those
/// whose strategy leaves it out (nodes, events, namespaces, config and RBAC kinds,
/// leases). Custom resources always have one.
fn tracks_generation(key: &ObjectKey) -> bool {
    let without = match key.api_version.as_str() {
        "v1" => matches!(
            key.kind.as_str(),
            "Node"
                | "Event"
                | "Namespace"
                | "ConfigMap"
                | "Secret"
                | "Service"
                | "ServiceAccount"
                | "Endpoints"
        ),
        "events.k8s.io/v1" | "coordination.k8s.io/v1" => true,
        v => v.starts_with("rbac.authorization.k8s.io/"),
    };
    !without
}

/// The 422 of a write with invalid fields.
fn invalid(errors: Vec<FieldError>) -> ApiError {
    ApiError::FieldInvalid(FieldErrors(errors))
}

/// A new Pod starts `Pending`, a new Namespace `Active`.
fn default_status(object: &mut Value, phase: &str) {
    let Some(map) = object.as_object_mut() else {
        return;
    };
    let status = map.entry("status").or_insert_with(|| json!({}));
    if let Some(status) = status.as_object_mut() {
        status.entry("phase").or_insert_with(|| json!(phase));
    }
}

/// A UUID-shaped identifier from a counter: unique in a store and reproducible.
fn pseudo_uuid(n: u64) -> String {
    format!("00000000-0000-4000-8000-{n:012x}")
}

/// The five-character suffix `generateName` gets, from a counter.
fn generated_suffix(n: u64) -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut x = n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (0..5)
        .map(|_| {
            let c = ALPHABET[(x % ALPHABET.len() as u64) as usize] as char;
            x /= ALPHABET.len() as u64;
            c
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    fn store() -> (MemoryStore, Arc<ManualClock>) {
        let start = DateTime::parse_from_rfc3339("2025-01-01T00:00:00Z")
            .expect("time")
            .with_timezone(&Utc);
        let clock = Arc::new(ManualClock::new(start));
        (MemoryStore::new(clock.clone()), clock)
    }

    fn pod(name: &str, node: Option<&str>) -> Value {
        let mut p = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "i"}]}});
        if let Some(n) = node {
            p["spec"]["nodeName"] = json!(n);
        }
        p
    }

    fn key(obj: &Value) -> ObjectKey {
        ObjectKey::of(obj).expect("key")
    }

    #[test]
    fn create_fills_in_server_fields_and_defaults() {
        let (mut s, _) = store();
        let p = s.create(pod("a", None)).expect("created");
        assert_eq!(p["metadata"]["namespace"], "default");
        assert_eq!(p["metadata"]["resourceVersion"], "1");
        assert_eq!(p["metadata"]["creationTimestamp"], "2025-01-01T00:00:00Z");
        assert_eq!(p["metadata"]["generation"], 1);
        assert_eq!(p["status"]["phase"], "Pending");
        assert!(p["metadata"]["uid"].as_str().is_some_and(|u| u.len() == 36));
        let n = s
            .create(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n", "namespace": "x"}}))
            .expect("node");
        assert!(
            n["metadata"].get("namespace").is_none(),
            "nodes are cluster-scoped"
        );
        assert_eq!(
            s.create(pod("a", None)),
            Err(ApiError::AlreadyExists("Pod default/a".into()))
        );
        let g = s
            .create(
                json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "web-"}}),
            )
            .expect("generated");
        let name = g["metadata"]["name"].as_str().expect("name");
        assert!(name.starts_with("web-") && name.len() == 9, "{name}");
        let unnamed = s.create(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {}}));
        assert_eq!(
            unnamed.map(|_| ()),
            Err(invalid(vec![FieldError::required(
                "metadata.name",
                "name or generateName is required"
            )]))
        );
    }

    #[test]
    fn every_write_of_refused_metadata_is_refused_and_changes_nothing() {
        let (mut s, _) = store();
        let bad_label = json!({"metadata": {"labels": {"ttl": "-99999h"}}});
        let refused = |r: Result<Written, ApiError>| match r {
            Err(ApiError::FieldInvalid(errors)) => errors.0[0].field,
            other => panic!("not refused: {:?}", other.map(|_| ())),
        };
        // Create.
        let mut p = pod("web", None);
        p["metadata"]["labels"] = json!({"ttl": "-99999h"});
        assert!(matches!(s.create(p), Err(ApiError::FieldInvalid(_))));
        let created = s.create(pod("web", None)).expect("created");
        let k = key(&created);
        // Patch (merge, and JSON), update, apply.
        let patched = s.patch(&k, PatchType::Merge, None, bad_label.clone());
        assert_eq!(refused(patched), "metadata.labels");
        let json_patch = json!([{"op": "add", "path": "/metadata/finalizers", "value": ["a/b/c"]}]);
        assert_eq!(
            refused(s.patch(&k, PatchType::Json, None, json_patch)),
            "metadata.finalizers"
        );
        let mut updated = Value::clone(&created);
        updated["metadata"]["annotations"] = json!({"big": "x".repeat(300 * 1024)});
        assert_eq!(refused(s.update(&k, updated, None)), "metadata.annotations");
        let mut applied = pod("web", None);
        applied["metadata"]["labels"] = json!({"-bad": "x"});
        assert_eq!(
            refused(s.apply(&applied, PatchType::Merge, None)),
            "metadata.labels"
        );
        // Through the status subresource, which also takes labels.
        let status = s.patch(&k, PatchType::Merge, Some("status"), bad_label);
        assert_eq!(refused(status), "metadata.labels");
        // Nothing was written.
        assert_eq!(s.get(&k), Some(&created));
        // A status write that leaves the metadata alone is not affected.
        let running = json!({"status": {"phase": "Running"}});
        assert!(
            s.patch(&k, PatchType::Merge, Some("status"), running)
                .is_ok()
        );
    }

    #[test]
    fn a_node_s_pod_cidrs_may_be_set_once_never_changed() {
        let (mut s, _) = store();
        let n = s
            .create(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}}))
            .expect("node");
        let k = key(&n);
        let set = json!({"spec": {"podCIDR": "10.244.1.0/24", "podCIDRs": ["10.244.1.0/24"]}});
        let w = s.patch(&k, PatchType::Merge, None, set.clone());
        assert!(
            matches!(w, Ok(Written::Stored { changed: true, .. })),
            "{w:?}"
        );
        // The same value again is no change; another one, or none, is forbidden.
        assert!(s.patch(&k, PatchType::Merge, None, set).is_ok());
        let forbidden = Err(pod_cidrs_forbidden());
        let other = json!({"spec": {"podCIDR": "10.244.2.0/24", "podCIDRs": ["10.244.2.0/24"]}});
        assert_eq!(
            s.patch(&k, PatchType::Merge, None, other).map(|_| ()),
            forbidden
        );
        let stored = (**s.get(&k).expect("node")).clone();
        let mut cleared = stored.clone();
        cleared["spec"] = json!({});
        assert_eq!(s.update(&k, cleared, None).map(|_| ()), forbidden);
        assert_eq!(
            s.get(&k).expect("node").pointer("/spec/podCIDRs"),
            Some(&json!(["10.244.1.0/24"]))
        );
        // Other writes to the node go through.
        let mut labelled = stored;
        labelled["metadata"]["labels"] = json!({"a": "b"});
        assert!(s.update(&k, labelled, None).is_ok());
    }

    #[test]
    fn status_and_main_writes_follow_subresource_rules() {
        let (mut s, _) = store();
        let p = s.create(pod("a", None)).expect("created");
        let k = key(&p);
        let w = s
            .patch(
                &k,
                PatchType::Merge,
                Some("status"),
                json!({"status": {"phase": "Running"}, "spec": {"nodeName": "sneaky"}}),
            )
            .expect("patched");
        let Written::Stored { object, changed } = w else {
            panic!("stored")
        };
        assert!(changed);
        assert_eq!(object["status"]["phase"], "Running");
        assert!(
            object["spec"].get("nodeName").is_none(),
            "a status write ignores spec"
        );
        assert_eq!(object["metadata"]["resourceVersion"], "2");
        let w = s
            .patch(
                &k,
                PatchType::Merge,
                None,
                json!({"status": {"phase": "Failed"}, "metadata": {"labels": {"a": "b"}}}),
            )
            .expect("patched");
        let Written::Stored { object, .. } = w else {
            panic!("stored")
        };
        assert_eq!(
            object["status"]["phase"], "Running",
            "a main write ignores status"
        );
        assert_eq!(object["metadata"]["labels"]["a"], "b");
        // The same patch again changes nothing and keeps the resourceVersion.
        let rv = object["metadata"]["resourceVersion"].clone();
        let w = s
            .patch(
                &k,
                PatchType::Merge,
                None,
                json!({"metadata": {"labels": {"a": "b"}}}),
            )
            .expect("patched");
        let Written::Stored { object, changed } = w else {
            panic!("stored")
        };
        assert!(!changed);
        assert_eq!(object["metadata"]["resourceVersion"], rv);
        // Server-owned fields cannot be changed by a patch.
        let w = s
            .patch(
                &k,
                PatchType::Merge,
                None,
                json!({"metadata": {"uid": "forged", "name": "b"}}),
            )
            .expect("patched");
        let Written::Stored { object, changed } = w else {
            panic!("stored")
        };
        assert!(!changed);
        assert_eq!(object["metadata"]["name"], "a");
    }

    #[test]
    fn a_custom_resource_with_a_status_subresource_is_created_without_its_status() {
        let (mut s, _) = store();
        let cr = |kind: &str| {
            json!({"apiVersion": "example.dev/v1", "kind": kind,
            "metadata": {"name": "x"}, "status": {"ready": true}})
        };
        for (kind, status) in [("WithStatus", true), ("Plain", false)] {
            let traits = CustomKind {
                namespaced: false,
                status,
            };
            s.set_custom_kind("example.dev/v1", kind, Some(traits));
            let created = s.create(cr(kind)).expect("created");
            assert_eq!(
                created.get("status").is_some(),
                !status,
                "{kind}: {created}"
            );
        }
    }

    #[test]
    fn spec_changes_bump_generation() {
        let (mut s, _) = store();
        let p = s.create(pod("a", None)).expect("created");
        let w = s
            .patch(
                &key(&p),
                PatchType::Merge,
                None,
                json!({"spec": {"nodeName": "n"}}),
            )
            .expect("patched");
        let Written::Stored { object, .. } = w else {
            panic!("stored")
        };
        assert_eq!(object["metadata"]["generation"], 2);
    }

    #[test]
    fn finalizers_hold_an_object_until_removed() {
        let (mut s, clock) = store();
        let mut p = pod("a", None);
        p["metadata"]["finalizers"] = json!(["kstage.dev/test"]);
        let p = s.create(p).expect("created");
        let k = key(&p);
        clock.advance(TimeDelta::seconds(5));
        let Ok(Deleted::Terminating {
            object,
            changed: true,
        }) = s.delete(&k, Some(0))
        else {
            panic!("marked")
        };
        assert_eq!(
            object["metadata"]["deletionTimestamp"],
            "2025-01-01T00:00:05Z"
        );
        // Deleting again changes nothing.
        assert!(matches!(
            s.delete(&k, Some(0)),
            Ok(Deleted::Terminating { changed: false, .. })
        ));
        // A client cannot unset deletionTimestamp.
        let w = s
            .patch(
                &k,
                PatchType::Merge,
                None,
                json!({"metadata": {"deletionTimestamp": null}}),
            )
            .expect("patched");
        assert!(matches!(w, Written::Stored { changed: false, .. }));
        // Removing the last finalizer removes the object.
        let w = s
            .patch(
                &k,
                PatchType::Json,
                None,
                json!([{"op": "remove", "path": "/metadata/finalizers"}]),
            )
            .expect("patched");
        assert!(matches!(w, Written::Removed(_)));
        assert!(s.get(&k).is_none());
        assert_eq!(
            s.delete(&k, Some(0)),
            Err(ApiError::NotFound("Pod default/a".into()))
        );
    }

    #[test]
    fn bound_pods_are_deleted_gracefully() {
        let (mut s, _) = store();
        let p = s.create(pod("a", Some("node-0"))).expect("created");
        let k = key(&p);
        let Ok(Deleted::Terminating {
            object,
            changed: true,
        }) = s.delete(&k, None)
        else {
            panic!("a bound pod is only marked")
        };
        assert_eq!(
            object["metadata"]["deletionTimestamp"],
            "2025-01-01T00:00:30Z"
        );
        assert_eq!(object["metadata"]["deletionGracePeriodSeconds"], 30);
        assert!(matches!(s.delete(&k, Some(0)), Ok(Deleted::Removed(_))));
        // An unbound pod goes at once.
        let q = s.create(pod("b", None)).expect("created");
        assert!(matches!(s.delete(&key(&q), None), Ok(Deleted::Removed(_))));
    }

    #[test]
    fn apply_creates_then_merges() {
        let (mut s, _) = store();
        let pv = json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv-1"}, "spec": {"capacity": {"storage": "1Gi"}}});
        let w = s.apply(&pv, PatchType::Apply, None).expect("applied");
        assert!(matches!(w, Written::Stored { changed: true, .. }));
        let status = json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv-1"}, "status": {"phase": "Released"}});
        let Written::Stored { object, .. } = s
            .apply(&status, PatchType::Merge, Some("status"))
            .expect("applied")
        else {
            panic!("stored")
        };
        assert_eq!(object["status"]["phase"], "Released");
        assert_eq!(object["spec"]["capacity"]["storage"], "1Gi");
        let missing = json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "nope"}, "status": {}});
        assert!(matches!(
            s.apply(&missing, PatchType::Merge, Some("status")),
            Err(ApiError::NotFound(_))
        ));
    }
}
