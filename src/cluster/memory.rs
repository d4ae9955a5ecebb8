//! [`MemoryCluster`]: the in-memory store served through [`Cluster`], with watches,
//! recorded events, a request log and injected faults. Tests and `kstage sim` run the
//! engine against it.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde_json::Value;
use tokio::sync::mpsc;

use super::ResourceRef;
use super::faults::{Fault, Faults, Verb};
use super::store::{Deleted, MemoryStore, Written};
use super::{Cluster, ClusterError, EventRequest, ObjectKey, PatchRequest, WatchEvent};
use crate::clock::Clock;
use crate::patch::PatchType;
use crate::retry::FailureKind;

/// An event recorded by [`MemoryCluster`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedEvent {
    /// The object it is about.
    pub object: ObjectKey,
    /// What was recorded.
    pub event: EventRequest,
    /// When (RFC 3339).
    pub at: String,
}

/// One request seen by [`MemoryCluster`], for tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The verb.
    pub verb: Verb,
    /// The object.
    pub object: ObjectKey,
    /// When (tokio time since the cluster was made).
    pub at: std::time::Duration,
    /// `None` if it succeeded, else the injected fault or the API error's status.
    pub failed: Option<String>,
}

/// The in-memory cluster.
#[derive(Debug)]
pub struct MemoryCluster {
    state: Mutex<State>,
    faults: Faults,
    origin: tokio::time::Instant,
}

#[derive(Debug)]
struct State {
    store: MemoryStore,
    watchers: Vec<(ResourceRef, mpsc::UnboundedSender<WatchEvent>)>,
    events: Vec<RecordedEvent>,
    /// The names of the named events recorded (namespace, name): a second create of one
    /// is AlreadyExists, which the caller takes as sent.
    event_names: std::collections::HashSet<(String, String)>,
    log: Vec<Request>,
    clock: Arc<dyn Clock>,
    sent: u64,
}

impl MemoryCluster {
    /// An empty cluster whose timestamps come from `clock`, failing as `faults` says.
    pub fn new(clock: Arc<dyn Clock>, faults: Faults) -> Self {
        Self {
            state: Mutex::new(State {
                store: MemoryStore::new(clock.clone()),
                watchers: Vec::new(),
                events: Vec::new(),
                event_names: std::collections::HashSet::new(),
                log: Vec::new(),
                clock,
                sent: 0,
            }),
            faults,
            origin: tokio::time::Instant::now(),
        }
    }

    /// How many watch events were sent to watchers, so a driver can tell when they
    /// have all been handled.
    pub fn watch_events_sent(&self) -> u64 {
        self.state().sent
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The fault injector (to script faults or read its counters).
    pub fn faults(&self) -> &Faults {
        &self.faults
    }

    /// The events recorded so far.
    pub fn events(&self) -> Vec<RecordedEvent> {
        self.state().events.clone()
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Request> {
        self.state().log.clone()
    }

    /// One object as stored.
    pub fn object(&self, key: &ObjectKey) -> Option<Arc<Value>> {
        self.state().store.get(key).cloned()
    }

    /// Every object as stored, ordered by key.
    pub fn objects(&self) -> Vec<Arc<Value>> {
        self.state().store.iter().map(|(_, v)| v.clone()).collect()
    }

    /// The number of objects.
    pub fn len(&self) -> usize {
        self.state().store.len()
    }

    /// Whether there are no objects.
    pub fn is_empty(&self) -> bool {
        self.state().store.is_empty()
    }

    /// Create an object as a user would, bypassing fault injection.
    pub fn insert(&self, object: Value) -> Result<Arc<Value>, ClusterError> {
        let mut state = self.state();
        let created = state.store.create(object)?;
        state.notify(&WatchEvent::Applied(created.clone()), &created);
        Ok(created)
    }

    /// Patch an object as a user would, bypassing fault injection.
    pub fn user_patch(
        &self,
        key: &ObjectKey,
        patch: PatchRequest<'_>,
    ) -> Result<Arc<Value>, ClusterError> {
        let mut state = self.state();
        let written = state
            .store
            .patch(key, patch.patch_type, patch.subresource, patch.data)?;
        Ok(stored(written, &mut state))
    }

    /// Delete an object as a user would (graceful for pods bound to a node), bypassing
    /// fault injection.
    pub fn user_delete(&self, key: &ObjectKey) -> Result<(), ClusterError> {
        let mut state = self.state();
        let deleted = state.store.delete(key, None)?;
        state.notify_deleted(deleted);
        Ok(())
    }

    /// Run one request: draw a fault, else do `op` on the store and notify watchers.
    fn request<T>(
        &self,
        verb: Verb,
        key: &ObjectKey,
        op: impl FnOnce(&mut State) -> Result<T, ClusterError>,
    ) -> Result<T, ClusterError> {
        let at = self.origin.elapsed();
        let fault = self.faults.draw(verb);
        let mut state = self.state();
        let result = match fault {
            Some(fault) => Err(fault_error(fault, verb, key)),
            None => op(&mut state),
        };
        let failed = match (&result, fault) {
            (_, Some(f)) => Some(f.to_string()),
            (Err(e), None) => Some(
                e.status
                    .map_or_else(|| e.message.clone(), |s| s.to_string()),
            ),
            (Ok(_), None) => None,
        };
        state.log.push(Request {
            verb,
            object: key.clone(),
            at,
            failed,
        });
        result
    }
}

impl State {
    fn notify(&mut self, event: &WatchEvent, object: &Value) {
        let api = object
            .get("apiVersion")
            .and_then(Value::as_str)
            .unwrap_or("");
        let kind = object.get("kind").and_then(Value::as_str).unwrap_or("");
        let mut sent = 0;
        self.watchers.retain(|(resource, tx)| {
            if resource.api_group == api && resource.kind == kind {
                let ok = tx.send(event.clone()).is_ok();
                sent += u64::from(ok);
                ok
            } else {
                !tx.is_closed()
            }
        });
        self.sent += sent;
    }

    fn notify_written(&mut self, written: &Written) {
        match written {
            Written::Stored { object, changed } => {
                if *changed {
                    self.notify(&WatchEvent::Applied(object.clone()), object);
                }
            }
            Written::Removed(object) => {
                self.notify(&WatchEvent::Deleted(object.clone()), object);
            }
        }
    }

    fn notify_deleted(&mut self, deleted: Deleted) -> Option<Arc<Value>> {
        match deleted {
            Deleted::Removed(object) => {
                self.notify(&WatchEvent::Deleted(object.clone()), &object);
                None
            }
            Deleted::Terminating { object, changed } => {
                if changed {
                    self.notify(&WatchEvent::Applied(object.clone()), &object);
                }
                Some(object)
            }
        }
    }
}

fn fault_error(fault: Fault, verb: Verb, key: &ObjectKey) -> ClusterError {
    let transport = |kind: FailureKind, what: &str| ClusterError {
        kind,
        status: None,
        reason: None,
        message: format!("{} {key}: {what} (injected)", verb.as_str()),
        retry_after: None,
    };
    match fault {
        Fault::Refused => transport(FailureKind::ConnectionRefused, "connection refused"),
        Fault::Reset => transport(FailureKind::ConnectionReset, "connection reset by peer"),
        Fault::Eof | Fault::Close => transport(FailureKind::Eof, "unexpected EOF"),
        Fault::Timeout => transport(FailureKind::Timeout, "request timed out"),
        Fault::Status { code, retry_after } => ClusterError {
            kind: FailureKind::Http,
            status: Some(code),
            reason: Some(super::status_reason(code).to_owned()),
            message: format!("{} {key}: HTTP {code} (injected)", verb.as_str()),
            retry_after,
        },
    }
}

/// The answer to a write: the object as stored, or, for a write that released it (the
/// last finalizer of a terminating object removed), its last state, as the API server
/// answers.
fn stored(written: Written, state: &mut State) -> Arc<Value> {
    let answer = match &written {
        Written::Stored { object, .. } | Written::Removed(object) => object.clone(),
    };
    state.notify_written(&written);
    answer
}

impl Cluster for MemoryCluster {
    /// The store compares before it writes and keeps the resourceVersion of a no-op.
    fn cheap_noop_writes(&self) -> bool {
        true
    }

    /// The store holds every object until it is replaced or removed.
    fn keeps_objects(&self) -> bool {
        true
    }

    fn watch(&self, resource: &ResourceRef) -> mpsc::UnboundedReceiver<WatchEvent> {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut state = self.state();
        let objects: Vec<Arc<Value>> = state
            .store
            .iter()
            .filter(|(k, _)| k.api_version == resource.api_group && k.kind == resource.kind)
            .map(|(_, v)| v.clone())
            .collect();
        if tx.send(WatchEvent::Restarted(objects)).is_ok() {
            state.sent += 1;
            state.watchers.push((resource.clone(), tx));
        }
        rx
    }

    fn get(
        &self,
        key: &ObjectKey,
    ) -> impl Future<Output = Result<Arc<Value>, ClusterError>> + Send {
        let result = self.request(Verb::Get, key, |state| {
            state
                .store
                .get(key)
                .cloned()
                .ok_or_else(|| super::ApiError::NotFound(key.to_string()).into())
        });
        std::future::ready(result)
    }

    fn create(
        &self,
        object: Value,
    ) -> impl Future<Output = Result<Arc<Value>, ClusterError>> + Send {
        let key = ObjectKey::of(&object).unwrap_or_default();
        let result = self.request(Verb::Create, &key, |state| {
            let created = state.store.create(object)?;
            state.notify(&WatchEvent::Applied(created.clone()), &created);
            Ok(created)
        });
        std::future::ready(result)
    }

    fn patch(
        &self,
        key: &ObjectKey,
        patch: PatchRequest<'_>,
    ) -> impl Future<Output = Result<Arc<Value>, ClusterError>> + Send {
        let result = self.request(Verb::Patch, key, |state| {
            let written =
                state
                    .store
                    .patch(key, patch.patch_type, patch.subresource, patch.data)?;
            Ok(stored(written, state))
        });
        std::future::ready(result)
    }

    fn apply(
        &self,
        object: &Value,
        patch_type: PatchType,
        subresource: Option<&str>,
        _as_user: Option<&str>,
    ) -> impl Future<Output = Result<Arc<Value>, ClusterError>> + Send {
        let key = ObjectKey::of(object).unwrap_or_default();
        let result = self.request(Verb::Apply, &key, |state| {
            let written = state.store.apply(object, patch_type, subresource)?;
            Ok(stored(written, state))
        });
        std::future::ready(result)
    }

    fn delete(
        &self,
        key: &ObjectKey,
        grace_period_seconds: Option<i64>,
    ) -> impl Future<Output = Result<Option<Arc<Value>>, ClusterError>> + Send {
        let result = self.request(Verb::Delete, key, |state| {
            let deleted = state.store.delete(key, grace_period_seconds)?;
            Ok(state.notify_deleted(deleted))
        });
        std::future::ready(result)
    }

    fn event(
        &self,
        key: &ObjectKey,
        event: &EventRequest,
    ) -> impl Future<Output = Result<(), ClusterError>> + Send {
        let result = self.request(Verb::Event, key, |state| {
            if let Some(name) = &event.name
                && !state
                    .event_names
                    .insert((key.namespace.clone(), name.clone()))
            {
                return Ok(()); // already recorded: AlreadyExists, taken as sent
            }
            let at = crate::cluster::store::timestamp(state.clock.now());
            state.events.push(RecordedEvent {
                object: key.clone(),
                event: event.clone(),
                at,
            });
            Ok(())
        });
        std::future::ready(result)
    }
}

/// Count recorded events per object and reason.
pub fn event_counts(events: &[RecordedEvent]) -> BTreeMap<(ObjectKey, String), usize> {
    let mut counts = BTreeMap::new();
    for e in events {
        *counts
            .entry((e.object.clone(), e.event.reason.clone()))
            .or_insert(0) += 1;
    }
    counts
}
