//! The API server's state: the in-memory store, the served resources, and one watch
//! history per kind.
//!
//! Every write takes the store lock, commits, and appends its watch event to the kind's
//! history before the lock is released, so histories are in resourceVersion order and a
//! watcher that starts under the lock misses nothing. Watchers read their kind's
//! history only (its own lock) and wait on a `watch` channel carrying the latest
//! resourceVersion, so a write costs O(1) whatever the number of watchers, and each
//! watcher O(1) per event. A history keeps its last `history_limit` events; a watch from
//! an older resourceVersion gets 410 Gone.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};

use serde_json::{Value, json};
use tokio::sync::watch;

use super::resources::{Registry, Resource};
use crate::clock::Clock;
use crate::cluster::store::{Deleted, MemoryStore, Written, check_resource_version};
use crate::cluster::{ApiError, ObjectKey};
use crate::patch::PatchType;

/// The kind of a watch event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Created.
    Added,
    /// Changed.
    Modified,
    /// Removed.
    Deleted,
}

impl EventType {
    /// The name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// An object as a write left it, with the watch record of the change (none when nothing
/// changed), whose JSON the answer to the write shares: the object is serialised once for
/// the writer and every watcher.
#[derive(Debug)]
pub struct Saved {
    /// The object after the write.
    pub object: Arc<Value>,
    record: Option<Arc<Record>>,
}

impl Saved {
    /// The object as JSON.
    pub fn json(&self) -> bytes::Bytes {
        match &self.record {
            Some(record) => record.object_json().clone(),
            None => bytes::Bytes::from(serde_json::to_vec(&*self.object).unwrap_or_default()),
        }
    }
}

/// One change, as watchers see it.
#[derive(Debug)]
pub struct Record {
    /// The resourceVersion of the change.
    pub rv: u64,
    /// What happened.
    pub event: EventType,
    /// The object after the change (the last state, for a deletion).
    pub object: Arc<Value>,
    /// The object before the change, so a filtered watch can tell an object that
    /// starts or stops matching.
    pub prev: Option<Arc<Value>>,
    /// The object's JSON, serialised once for every watcher.
    json: std::sync::OnceLock<bytes::Bytes>,
}

impl Record {
    /// The object as JSON, serialised on first use.
    pub fn object_json(&self) -> &bytes::Bytes {
        self.json.get_or_init(|| {
            bytes::Bytes::from(serde_json::to_vec(&*self.object).unwrap_or_default())
        })
    }
}

#[derive(Debug, Default)]
struct History {
    events: VecDeque<Arc<Record>>,
    /// The resourceVersion of the newest event dropped; watching from before it is 410.
    compacted: u64,
}

/// The watch history of one kind.
#[derive(Debug)]
pub struct Channel {
    history: Mutex<History>,
    latest: watch::Sender<u64>,
    limit: usize,
}

/// Why a watch cannot resume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expired {
    /// The oldest resourceVersion one can still watch from.
    pub oldest: u64,
}

impl Channel {
    /// A history of `limit` events; nothing at or before `floor` can be watched from.
    fn new(limit: usize, floor: u64) -> Self {
        Self {
            history: Mutex::new(History {
                compacted: floor,
                ..History::default()
            }),
            latest: watch::Sender::new(0),
            limit: limit.max(1),
        }
    }

    fn push(&self, record: Record) -> Arc<Record> {
        let rv = record.rv;
        let record = Arc::new(record);
        {
            let mut h = lock(&self.history);
            h.events.push_back(record.clone());
            while h.events.len() > self.limit {
                if let Some(old) = h.events.pop_front() {
                    h.compacted = old.rv;
                }
            }
        }
        self.latest.send_replace(rv);
        record
    }

    /// Every event after resourceVersion `after`, or [`Expired`] when some were dropped.
    pub fn after(&self, after: u64) -> Result<Vec<Arc<Record>>, Expired> {
        let h = lock(&self.history);
        if after < h.compacted {
            return Err(Expired {
                oldest: h.compacted,
            });
        }
        let start = h.events.partition_point(|r| r.rv <= after);
        Ok(h.events.range(start..).cloned().collect())
    }

    /// A receiver that wakes when an event is appended.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.latest.subscribe()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The namespaces every cluster starts with.
pub const INITIAL_NAMESPACES: [&str; 4] =
    ["default", "kube-system", "kube-public", "kube-node-lease"];

/// The state shared by every connection.
#[derive(Debug)]
pub struct State {
    store: Mutex<MemoryStore>,
    registry: RwLock<Registry>,
    /// By `apiVersion`, then `kind`: looked up with borrowed strings on every write.
    channels: RwLock<HashMap<String, HashMap<String, Arc<Channel>>>>,
    history_limit: usize,
    /// The resourceVersion a restored state started at: its watch history is gone, so a
    /// watch from before it gets 410 Expired (as after an etcd compaction).
    floor: u64,
    /// Set by [`State::close`]: writes answer 503.
    closed: std::sync::atomic::AtomicBool,
}

/// A list: the objects and the resourceVersion they were read at.
#[derive(Debug)]
pub struct Listed {
    /// The objects.
    pub items: Vec<Arc<Value>>,
    /// The store's resourceVersion when they were read.
    pub rv: u64,
    /// The key of the last item when the list stopped at its limit with more to come.
    pub more_after: Option<ObjectKey>,
}

/// What a watch starts with.
#[derive(Debug)]
pub struct WatchStart {
    /// The kind's history.
    pub channel: Arc<Channel>,
    /// Objects to send as `ADDED` first (a watch without a resourceVersion).
    pub initial: Vec<Arc<Value>>,
    /// The resourceVersion the watch follows from.
    pub from: u64,
}

impl State {
    /// A state with the initial namespaces, timestamps from `clock`, and
    /// `history_limit` watch events kept per kind.
    pub fn new(clock: Arc<dyn Clock>, history_limit: usize) -> Self {
        let state = Self {
            store: Mutex::new(MemoryStore::new(clock)),
            registry: RwLock::new(Registry::new()),
            channels: RwLock::new(HashMap::new()),
            history_limit,
            floor: 0,
            closed: Default::default(),
        };
        for ns in INITIAL_NAMESPACES {
            let namespace =
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
            // Cannot fail on an empty store.
            let _ = state.create(namespace);
        }
        state
    }

    /// The served resources.
    pub fn registry(&self) -> std::sync::RwLockReadGuard<'_, Registry> {
        self.registry.read().unwrap_or_else(PoisonError::into_inner)
    }

    /// The resource of objects of `api_version` and `kind`.
    pub fn resource_of(&self, api_version: &str, kind: &str) -> Option<Arc<Resource>> {
        self.registry().by_kind(api_version, kind)
    }

    fn store(&self) -> MutexGuard<'_, MemoryStore> {
        lock(&self.store)
    }

    /// The store, for a write: 503 once [`State::close`] has run. Checked under the
    /// store's lock, so no write lands after the snapshot `close` returns.
    fn writable(&self) -> Result<MutexGuard<'_, MemoryStore>, ApiError> {
        let store = self.store();
        if self.closed.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(ApiError::Unavailable("the server is shutting down".into()));
        }
        Ok(store)
    }

    /// Take no write from now on and return the state as it stays
    /// ([`State::snapshot`]): what a stopping `kstage apiserver --state` keeps, every
    /// write it acknowledged included.
    pub fn close(&self) -> Value {
        let store = self.store();
        self.closed
            .store(true, std::sync::atomic::Ordering::Relaxed);
        Self::snapshot_of(&store)
    }

    /// The number of objects stored.
    pub fn len(&self) -> usize {
        self.store().len()
    }

    /// Whether nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.store().is_empty()
    }

    /// The watch history of a kind (created on first use).
    pub fn channel(&self, api_version: &str, kind: &str) -> Arc<Channel> {
        if let Some(c) = self
            .channels
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(api_version)
            .and_then(|kinds| kinds.get(kind))
        {
            return c.clone();
        }
        self.channels
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(api_version.to_owned())
            .or_default()
            .entry(kind.to_owned())
            .or_insert_with(|| Arc::new(Channel::new(self.history_limit, self.floor)))
            .clone()
    }

    fn record(
        &self,
        store: &MemoryStore,
        key: &ObjectKey,
        event: EventType,
        object: Arc<Value>,
        prev: Option<Arc<Value>>,
    ) -> Arc<Record> {
        self.channel(&key.api_version, &key.kind).push(Record {
            rv: store.resource_version(),
            event,
            object,
            prev,
            json: std::sync::OnceLock::new(),
        })
    }

    /// Record the outcome of a write and return the object as the client sees it.
    fn written(
        &self,
        store: &MemoryStore,
        key: &ObjectKey,
        prev: Option<Arc<Value>>,
        written: Written,
    ) -> Arc<Value> {
        self.saved(store, key, prev, written).object
    }

    /// [`State::written`], keeping the watch record (with the JSON it shares).
    fn saved(
        &self,
        store: &MemoryStore,
        key: &ObjectKey,
        prev: Option<Arc<Value>>,
        written: Written,
    ) -> Saved {
        let (object, event) = match written {
            Written::Stored {
                object,
                changed: true,
            } => (object, Some(EventType::Modified)),
            Written::Stored { object, .. } => (object, None),
            Written::Removed(object) => (object, Some(EventType::Deleted)),
        };
        let record = event.map(|event| self.record(store, key, event, object.clone(), prev));
        Saved { object, record }
    }

    /// One object.
    pub fn get(&self, key: &ObjectKey) -> Result<Arc<Value>, ApiError> {
        self.store()
            .get(key)
            .cloned()
            .ok_or_else(|| ApiError::NotFound(key.to_string()))
    }

    /// The objects of a resource in `namespace` (all when `None`) that `keep` accepts,
    /// in key order after `after`, at most `limit` (0: all), as they were at
    /// resourceVersion `at` (`None`: now).
    ///
    /// A list continued page by page reads every page at the first page's version, as a
    /// real API server does: a client then watches from that version and misses nothing.
    /// Objects changed since are taken back to their state then from the kind's watch
    /// history ([`Expired`] when it no longer reaches back that far).
    pub fn list(
        &self,
        resource: &Resource,
        namespace: Option<&str>,
        after: Option<&ObjectKey>,
        limit: usize,
        at: Option<u64>,
        keep: impl Fn(&Value) -> bool,
    ) -> Result<Listed, Expired> {
        let api_version = resource.api_version();
        let channel = self.channel(&api_version, &resource.kind);
        let store = self.store();
        let now = store.resource_version();
        let rv = at.unwrap_or(now).min(now);
        // Each object changed since `rv`, with its state at `rv` (`None`: absent then).
        let mut then: BTreeMap<ObjectKey, Option<Arc<Value>>> = BTreeMap::new();
        if rv < now {
            for record in channel.after(rv)? {
                if let Some(key) = ObjectKey::of(&record.object) {
                    then.entry(key).or_insert_with(|| record.prev.clone());
                }
            }
        }
        let in_scope = |k: &ObjectKey| {
            namespace.is_none_or(|ns| k.namespace == ns) && after.is_none_or(|a| k > a)
        };
        let mut current = store
            .range(&api_version, &resource.kind, namespace, after)
            .filter(|(k, _)| !then.contains_key(*k))
            .peekable();
        let mut past = then
            .iter()
            .filter(|(k, _)| in_scope(k))
            .filter_map(|(k, v)| v.as_ref().map(|v| (k, v)))
            .peekable();
        let mut items = Vec::new();
        let mut more_after = None;
        let mut last: Option<&ObjectKey> = None;
        loop {
            let take_past = match (current.peek(), past.peek()) {
                (None, None) => break,
                (Some(_), None) => false,
                (None, Some(_)) => true,
                (Some((c, _)), Some((p, _))) => p < c,
            };
            let next = if take_past {
                past.next()
            } else {
                current.next()
            };
            let Some((key, object)) = next else { break };
            if !keep(object) {
                continue;
            }
            if limit > 0 && items.len() == limit {
                more_after = last.cloned();
                break;
            }
            items.push(object.clone());
            last = Some(key);
        }
        Ok(Listed {
            items,
            rv,
            more_after,
        })
    }

    /// Start a watch of a resource: from resourceVersion `from`, or (`None`) from now
    /// with every current object in `namespace` first.
    pub fn watch(
        &self,
        resource: &Resource,
        namespace: Option<&str>,
        from: Option<u64>,
    ) -> Result<WatchStart, Expired> {
        let api_version = resource.api_version();
        let channel = self.channel(&api_version, &resource.kind);
        // Under the store lock no write can slip between the snapshot and the follow.
        let store = self.store();
        let (initial, from) = match from {
            Some(rv) => {
                channel.after(rv)?;
                (Vec::new(), rv)
            }
            None => (
                store
                    .range(&api_version, &resource.kind, namespace, None)
                    .map(|(_, o)| o.clone())
                    .collect(),
                store.resource_version(),
            ),
        };
        drop(store);
        Ok(WatchStart {
            channel,
            initial,
            from,
        })
    }

    /// The store's latest resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.store().resource_version()
    }

    /// Everything a restarted server needs to go on where this one stopped: every object
    /// as stored, the last resourceVersion and uid handed out (`kstage apiserver --state`).
    pub fn snapshot(&self) -> Value {
        Self::snapshot_of(&self.store())
    }

    fn snapshot_of(store: &MemoryStore) -> Value {
        let objects: Vec<&Value> = store.iter().map(|(_, o)| &**o).collect();
        json!({
            "kind": "KstageApiServerState",
            "resourceVersion": store.resource_version(),
            "uids": store.uids(),
            "objects": objects,
        })
    }

    /// The state [`State::snapshot`] kept: its objects (CustomResourceDefinitions
    /// serving their resources again) and counters; resourceVersions go on from where
    /// it stopped, and no watch resumes from before it.
    pub fn restored(
        clock: Arc<dyn Clock>,
        history_limit: usize,
        snapshot: &Value,
    ) -> Result<Self, String> {
        if snapshot["kind"] != "KstageApiServerState" {
            return Err("not a kstage API server state (kind KstageApiServerState)".into());
        }
        let counter = |field: &str| {
            snapshot[field]
                .as_u64()
                .ok_or_else(|| format!("{field} is not a number"))
        };
        let (rv, uids) = (counter("resourceVersion")?, counter("uids")?);
        let objects = snapshot["objects"]
            .as_array()
            .ok_or("objects is not a list")?;
        let mut store = MemoryStore::new(clock);
        let mut crds = Vec::new();
        for (i, object) in objects.iter().enumerate() {
            let key = ObjectKey::of(object).ok_or_else(|| format!("objects[{i}] has no key"))?;
            if is_crd(&key) {
                let resources = Registry::from_crd(object)
                    .map_err(|e| format!("CustomResourceDefinition {:?}: {e}", key.name))?;
                crds.push((key.name.clone(), resources));
            }
            store.restore(key, object.clone());
        }
        store.restore_counters(rv, uids);
        let mut registry = Registry::new();
        for (name, resources) in crds {
            for r in &resources {
                store.set_custom_kind(&r.api_version(), &r.kind, Some(r.custom_kind()));
            }
            registry.define(&name, resources);
        }
        Ok(Self {
            store: Mutex::new(store),
            registry: RwLock::new(registry),
            channels: RwLock::new(HashMap::new()),
            history_limit,
            floor: rv,
            closed: Default::default(),
        })
    }

    /// POST: create an object. Its namespace must exist; a CustomResourceDefinition is
    /// validated and starts serving its resources.
    pub fn create(&self, object: Value) -> Result<Arc<Value>, ApiError> {
        let crd = crd_resources(&object)?;
        let mut store = self.writable()?;
        check_namespace(&store, &object)?;
        let created = store.create(object)?;
        let key = ObjectKey::of(&created).ok_or_else(|| ApiError::BadRequest("no name".into()))?;
        self.record(&store, &key, EventType::Added, created.clone(), None);
        if let Some(resources) = crd {
            return Ok(self.define_crd(&mut store, &key, resources));
        }
        Ok(created)
    }

    /// PUT: replace an object or its status.
    pub fn update(
        &self,
        key: &ObjectKey,
        object: Value,
        subresource: Option<&str>,
    ) -> Result<Arc<Value>, ApiError> {
        let crd = crd_resources(&object)?;
        let mut store = self.writable()?;
        let prev = store.get(key).cloned();
        let written = store.update(key, object, subresource)?;
        let object = self.written(&store, key, prev, written);
        self.after_crd_write(&mut store, key, &object, crd);
        Ok(object)
    }

    /// PATCH an object or its status. A `metadata.resourceVersion` in a merge or
    /// strategic patch is a precondition, as on a real server.
    pub fn patch(
        &self,
        key: &ObjectKey,
        patch_type: PatchType,
        subresource: Option<&str>,
        data: Value,
    ) -> Result<Saved, ApiError> {
        let mut store = self.writable()?;
        let prev = store
            .get(key)
            .cloned()
            .ok_or_else(|| ApiError::NotFound(key.to_string()))?;
        if patch_type != PatchType::Json {
            check_resource_version(&prev, &data, key)?;
        }
        let written = store.patch(key, patch_type, subresource, data)?;
        let saved = self.saved(&store, key, Some(prev), written);
        self.after_crd_write(&mut store, key, &saved.object, None);
        Ok(saved)
    }

    /// Server-side apply (last applier wins): create, or merge onto the stored object.
    /// Returns the object and whether it was created.
    pub fn apply(
        &self,
        object: Value,
        patch_type: PatchType,
        subresource: Option<&str>,
    ) -> Result<(Arc<Value>, bool), ApiError> {
        let key = ObjectKey::of(&object)
            .ok_or_else(|| ApiError::BadRequest("the applied object has no name".into()))?;
        let crd = crd_resources(&object)?;
        let mut store = self.writable()?;
        let prev = store.get(&key).cloned();
        if prev.is_none() {
            check_namespace(&store, &object)?;
        }
        let written = store.apply(&object, patch_type, subresource)?;
        let created = prev.is_none();
        let object = match (created, written) {
            (true, Written::Stored { object, .. }) => {
                self.record(&store, &key, EventType::Added, object.clone(), None);
                object
            }
            (_, written) => self.written(&store, &key, prev, written),
        };
        let object = if created && let Some(resources) = crd {
            self.define_crd(&mut store, &key, resources)
        } else {
            self.after_crd_write(&mut store, &key, &object, None);
            object
        };
        Ok((object, created))
    }

    /// DELETE with a grace period (`None`: the default). Returns the object and whether
    /// it is gone (`false`: marked, waiting for finalizers or a graceful pod deletion).
    /// Deleting a Namespace deletes what is in it; deleting a CustomResourceDefinition
    /// deletes its custom resources.
    pub fn delete(
        &self,
        key: &ObjectKey,
        grace_period_seconds: Option<i64>,
    ) -> Result<(Arc<Value>, bool), ApiError> {
        let mut store = self.writable()?;
        let deleted = self.delete_locked(&mut store, key, grace_period_seconds)?;
        if let (Some(object), true) = (&deleted.0, deleted.1) {
            if key.api_version == "v1" && key.kind == "Namespace" {
                self.delete_namespace_content(&mut store, &key.name);
            }
            if is_crd(key) {
                self.undefine_crd(&mut store, &key.name, object);
            }
        }
        let (object, gone) = deleted;
        Ok((object.unwrap_or_default(), gone))
    }

    fn delete_locked(
        &self,
        store: &mut MemoryStore,
        key: &ObjectKey,
        grace_period_seconds: Option<i64>,
    ) -> Result<(Option<Arc<Value>>, bool), ApiError> {
        let prev = store.get(key).cloned();
        match store.delete(key, grace_period_seconds)? {
            Deleted::Removed(object) => {
                // The deletion has its own resourceVersion, as on a real server.
                let mut last = Value::clone(&object);
                if let Some(meta) = last.get_mut("metadata").and_then(Value::as_object_mut) {
                    meta.insert(
                        "resourceVersion".into(),
                        json!(store.resource_version().to_string()),
                    );
                }
                let last = Arc::new(last);
                self.record(store, key, EventType::Deleted, last.clone(), prev);
                Ok((Some(last), true))
            }
            Deleted::Terminating { object, changed } => {
                if changed {
                    self.record(store, key, EventType::Modified, object.clone(), prev);
                }
                Ok((Some(object), false))
            }
        }
    }

    fn delete_namespace_content(&self, store: &mut MemoryStore, namespace: &str) {
        let keys: Vec<ObjectKey> = store
            .iter()
            .filter(|(k, _)| k.namespace == namespace)
            .map(|(k, _)| k.clone())
            .collect();
        for key in keys {
            let _ = self.delete_locked(store, &key, Some(0));
        }
    }

    fn define_crd(
        &self,
        store: &mut MemoryStore,
        key: &ObjectKey,
        resources: Vec<Resource>,
    ) -> Arc<Value> {
        let accepted = store
            .get(key)
            .and_then(|crd| crd.pointer("/spec/names").cloned())
            .unwrap_or_default();
        let versions: Vec<String> = resources.iter().map(|r| r.version.clone()).collect();
        for r in &resources {
            store.set_custom_kind(&r.api_version(), &r.kind, Some(r.custom_kind()));
        }
        let gone = self
            .registry
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .define(&key.name, resources);
        for r in gone {
            store.set_custom_kind(&r.api_version(), &r.kind, None);
        }
        let status = json!({"status": {
            "conditions": [
                {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts", "message": "no conflicts found"},
                {"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "the initial names have been accepted"},
            ],
            "acceptedNames": accepted,
            "storedVersions": versions,
        }});
        let prev = store.get(key).cloned();
        match store.patch(key, PatchType::Merge, Some("status"), status) {
            Ok(written) => self.written(store, key, prev, written),
            Err(_) => prev.unwrap_or_default(),
        }
    }

    /// After a write of a CustomResourceDefinition: serve what it now defines.
    fn after_crd_write(
        &self,
        store: &mut MemoryStore,
        key: &ObjectKey,
        object: &Value,
        resources: Option<Vec<Resource>>,
    ) {
        if !is_crd(key) || store.get(key).is_none() {
            return;
        }
        let resources = match resources {
            Some(r) => r,
            None => match Registry::from_crd(object) {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(crd = %key.name, "keeping the old definition: {e}");
                    return;
                }
            },
        };
        self.define_crd(store, key, resources);
    }

    fn undefine_crd(&self, store: &mut MemoryStore, name: &str, _crd: &Value) {
        let gone = self
            .registry
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .undefine(name);
        for r in gone {
            let api_version = r.api_version();
            let keys: Vec<ObjectKey> = store
                .range(&api_version, &r.kind, None, None)
                .map(|(k, _)| k.clone())
                .collect();
            for key in keys {
                let _ = self.delete_locked(store, &key, Some(0));
            }
            store.set_custom_kind(&api_version, &r.kind, None);
        }
    }
}

fn is_crd(key: &ObjectKey) -> bool {
    key.api_version == "apiextensions.k8s.io/v1" && key.kind == "CustomResourceDefinition"
}

/// The resources a CRD being written defines; `None` for other objects.
fn crd_resources(object: &Value) -> Result<Option<Vec<Resource>>, ApiError> {
    match ObjectKey::of(object) {
        Some(key) if is_crd(&key) => Registry::from_crd(object).map(Some).map_err(|e| {
            ApiError::Invalid(format!("CustomResourceDefinition {:?}: {e}", key.name))
        }),
        _ => Ok(None),
    }
}

/// A namespaced object can only be created in a namespace that exists.
fn check_namespace(store: &MemoryStore, object: &Value) -> Result<(), ApiError> {
    let Some(ns) = object
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .filter(|ns| !ns.is_empty())
    else {
        return Ok(());
    };
    let key = ObjectKey {
        api_version: "v1".into(),
        kind: "Namespace".into(),
        namespace: String::new(),
        name: ns.to_owned(),
    };
    match store.get(&key) {
        None => Err(ApiError::NotFound(format!("Namespace {ns}"))),
        Some(n) if n.pointer("/metadata/deletionTimestamp").is_some() => {
            Err(ApiError::Forbidden(format!(
                "unable to create new content in namespace {ns} because it is being terminated"
            )))
        }
        Some(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::SystemClock;

    fn state(limit: usize) -> State {
        State::new(Arc::new(SystemClock), limit)
    }

    fn pod(name: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "spec": {"containers": []}})
    }

    #[test]
    fn a_restored_state_serves_what_was_kept_and_goes_on_from_its_versions() {
        let s = state(100);
        let crd = json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Cluster",
                     "names": {"kind": "Widget", "plural": "widgets"},
                     "versions": [{"name": "v1", "served": true, "storage": true,
                                   "subresources": {"status": {}},
                                   "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]},
        });
        s.create(crd).expect("CRD");
        s.create(
            json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}),
        )
        .expect("widget");
        let a = s.create(pod("a")).expect("a");
        let pods = s.resource_of("v1", "Pod").expect("pods");
        let before = s.resource_version();
        // Through a file, as `kstage apiserver --state` keeps it.
        let text = serde_json::to_string(&s.snapshot()).expect("JSON");
        let r = State::restored(
            Arc::new(SystemClock),
            100,
            &serde_json::from_str(&text).expect("JSON"),
        )
        .expect("restored");
        assert_eq!(r.len(), s.len());
        assert_eq!(r.resource_version(), before);
        let key = ObjectKey::of(&pod("a")).expect("key");
        assert_eq!(
            r.get(&key).expect("kept"),
            a,
            "as stored, uid and versions too"
        );
        // The CRD serves its kind again, with its status subresource.
        let widgets = r.resource_of("example.com/v1", "Widget").expect("served");
        assert_eq!(
            r.list(&widgets, None, None, 0, None, |_| true)
                .expect("list")
                .items
                .len(),
            1
        );
        // Versions and uids go on; no watch resumes from before the restart.
        let b = r.create(pod("b")).expect("b");
        let rv: u64 = b["metadata"]["resourceVersion"]
            .as_str()
            .and_then(|v| v.parse().ok())
            .expect("rv");
        assert!(rv > before);
        assert_ne!(b["metadata"]["uid"], a["metadata"]["uid"]);
        assert!(
            r.watch(&pods, None, Some(before - 1)).is_err(),
            "410 Expired"
        );
        let from_now = r
            .watch(&pods, None, Some(before))
            .expect("from the restart on");
        assert_eq!(
            from_now.channel.after(before).expect("events").len(),
            1,
            "b's ADDED"
        );
        assert!(State::restored(Arc::new(SystemClock), 1, &json!({"kind": "Other"})).is_err());
        // Closed, it takes no write: what close returned stays the whole state.
        let kept = r.close();
        assert_eq!(kept["resourceVersion"], json!(r.resource_version()));
        let refused = r.create(pod("c")).expect_err("closed");
        assert_eq!(refused.status(), 503);
        assert_eq!(r.snapshot(), kept);
    }

    #[test]
    fn writes_are_recorded_in_order_and_old_ones_expire() {
        let s = state(3);
        let pods = s.resource_of("v1", "Pod").expect("pods");
        let start = s.watch(&pods, None, None).expect("watch");
        assert!(start.initial.is_empty());
        for name in ["a", "b"] {
            s.create(pod(name)).expect("created");
        }
        let key = ObjectKey::of(&pod("a")).expect("key");
        s.patch(
            &key,
            PatchType::Merge,
            None,
            json!({"metadata": {"labels": {"x": "y"}}}),
        )
        .expect("patched");
        s.delete(&key, None).expect("deleted");
        let events = start.channel.after(start.from);
        assert!(events.is_err(), "4 events, 3 kept: the first is gone");
        let all = start.channel.after(start.from + 1).expect("kept");
        let kinds: Vec<_> = all.iter().map(|r| r.event).collect();
        assert_eq!(
            kinds,
            [EventType::Added, EventType::Modified, EventType::Deleted]
        );
        assert!(all.windows(2).all(|w| w[0].rv < w[1].rv));
        let last = &all[2];
        assert_eq!(
            last.object["metadata"]["resourceVersion"],
            json!(last.rv.to_string()),
            "a deletion has its own resourceVersion"
        );
    }

    #[test]
    fn namespaces_must_exist_and_take_their_content_with_them() {
        let s = state(100);
        let mut p = pod("a");
        p["metadata"]["namespace"] = json!("team");
        assert!(matches!(s.create(p.clone()), Err(ApiError::NotFound(_))));
        s.create(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}}))
            .expect("namespace");
        s.create(p).expect("pod");
        let ns = ObjectKey {
            api_version: "v1".into(),
            kind: "Namespace".into(),
            namespace: String::new(),
            name: "team".into(),
        };
        s.delete(&ns, None).expect("deleted");
        let pods = s.resource_of("v1", "Pod").expect("pods");
        assert!(
            s.list(&pods, Some("team"), None, 0, None, |_| true)
                .expect("list")
                .items
                .is_empty()
        );
    }

    #[test]
    fn lists_page_by_key() {
        let s = state(100);
        for i in 0..5 {
            s.create(pod(&format!("p{i}"))).expect("created");
        }
        let pods = s.resource_of("v1", "Pod").expect("pods");
        let first = s.list(&pods, None, None, 2, None, |_| true).expect("list");
        assert_eq!(first.items.len(), 2);
        let after = first.more_after.expect("more");
        let rest = s
            .list(&pods, None, Some(&after), 0, Some(first.rv), |_| true)
            .expect("list");
        assert_eq!(rest.items.len(), 3);
        assert!(rest.more_after.is_none());
        assert_eq!(rest.items[0]["metadata"]["name"], "p2");
    }

    #[test]
    fn later_pages_read_the_first_page_s_version() {
        let s = state(100);
        for i in 0..5 {
            s.create(pod(&format!("p{i}"))).expect("created");
        }
        let pods = s.resource_of("v1", "Pod").expect("pods");
        let first = s.list(&pods, None, None, 2, None, |_| true).expect("list");
        let key = |n: &str| ObjectKey::of(&pod(n)).expect("key");
        s.patch(
            &key("p3"),
            PatchType::Merge,
            None,
            json!({"metadata": {"labels": {"new": "yes"}}}),
        )
        .expect("patched");
        s.delete(&key("p4"), None).expect("deleted");
        s.create(pod("p5")).expect("created");
        let after = first.more_after.clone().expect("more");
        let rest = s
            .list(&pods, None, Some(&after), 0, Some(first.rv), |_| true)
            .expect("list");
        let names: Vec<&str> = rest
            .items
            .iter()
            .filter_map(|o| o.pointer("/metadata/name").and_then(Value::as_str))
            .collect();
        assert_eq!(
            names,
            ["p2", "p3", "p4"],
            "as at the first page: p4 there, p5 not yet"
        );
        assert!(
            rest.items[1].pointer("/metadata/labels/new").is_none(),
            "p3 before its patch"
        );
        assert_eq!(rest.rv, first.rv);
        // Once the history no longer reaches back, the continuation expires.
        let small = state(1);
        for i in 0..3 {
            small.create(pod(&format!("q{i}"))).expect("created");
        }
        let page = small
            .list(&pods, None, None, 1, None, |_| true)
            .expect("list");
        small.create(pod("q3")).expect("created");
        small.create(pod("q4")).expect("created");
        assert!(
            small
                .list(
                    &pods,
                    None,
                    page.more_after.as_ref(),
                    0,
                    Some(page.rv),
                    |_| true
                )
                .is_err()
        );
    }
}
