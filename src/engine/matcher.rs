//! The matcher: watch events become the newest version of each object (the cache), and
//! an object that is not busy is matched to its next Stage, queued with its delay in the
//! fresh lane (replacing any queued job of the object). A Stage set change matches every
//! object of an affected resource again.

use std::collections::HashSet;
use std::sync::{Arc, PoisonError};

use serde_json::Value;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::cache::{Held, Seen, pack, resource_version};
use super::{Engine, FRESH_LANE, Job, Keys, Metrics, lock};
use crate::cluster::{Cluster, ObjectKey, WatchEvent};
use crate::decide::Choice;
use crate::stage::{ResourceRef, StageSet};
use std::sync::atomic::{AtomicU64, Ordering};

impl<C: Cluster> Engine<C> {
    /// Start a watch task for every resource the Stages name that is not watched yet;
    /// each hands its events to [`Engine::observe_from`].
    pub(super) fn watch_new_resources(self: &Arc<Self>) -> Vec<JoinHandle<()>> {
        let stages = self.stages();
        let mut watched = lock(&self.watched);
        let mut tasks = Vec::new();
        for resource in stages.resources() {
            if !watched.insert(resource.clone()) {
                continue;
            }
            let mut rx = self.cluster.watch(resource);
            let engine = self.clone();
            let resource = resource.clone();
            tasks.push(tokio::spawn(async move {
                while let Some(event) = rx.recv().await {
                    if engine.queue.is_closed() {
                        break;
                    }
                    let listed = matches!(event, WatchEvent::Restarted(_));
                    engine.observe_from(Some(&resource), event);
                    if listed && lock(&engine.synced).insert(resource.clone()) {
                        engine.synced_news.notify_waiters();
                    }
                }
            }));
        }
        tasks
    }

    /// Replace the Stage set and match again every object of a resource whose Stages
    /// changed (KWOK keeps playing the old choice until the object changes).
    pub fn set_stages(self: &Arc<Self>, stages: StageSet) -> Vec<JoinHandle<()>> {
        let old = {
            let mut current = self.stages.write().unwrap_or_else(PoisonError::into_inner);
            std::mem::replace(&mut *current, Arc::new(stages))
        };
        let new = self.stages();
        let affected: HashSet<&ResourceRef> = old.resources().chain(new.resources()).collect();
        let mut keys = lock(&self.keys);
        let objects: Vec<(ObjectKey, Arc<Value>)> = keys
            .latest
            .iter()
            .filter(|(k, _)| {
                affected.contains(&ResourceRef {
                    api_group: k.api_version.clone(),
                    kind: k.kind.clone(),
                })
            })
            .filter_map(|(k, seen)| Some((k.clone(), seen.object.upgrade()?)))
            .collect();
        for (key, object) in objects {
            self.schedule(&mut keys, key, &object);
        }
        drop(keys);
        self.watch_new_resources()
    }

    /// Handle one watch event.
    pub fn observe(&self, event: WatchEvent) {
        self.observe_from(None, event);
    }

    /// Handle one watch event of `resource`'s watch: a restart then also forgets the
    /// objects of that resource when it lists none at all.
    pub fn observe_from(&self, resource: Option<&ResourceRef>, event: WatchEvent) {
        let _counted = Counted(&self.observed);
        match event {
            WatchEvent::Applied(object) => {
                // Packed before the lock is taken: the workers wait for it.
                let held = self.hold(&object);
                self.applied(&mut lock(&self.keys), object, held);
            }
            WatchEvent::Deleted(object) => {
                if let Some(key) = ObjectKey::of(&object) {
                    self.deleted(&mut lock(&self.keys), &key);
                }
                self.gone(&object);
            }
            WatchEvent::Restarted(objects) => {
                let held: Vec<Held> = objects.iter().map(|o| self.hold(o)).collect();
                let mut keys = lock(&self.keys);
                let mut seen = HashSet::new();
                let mut resources = HashSet::new();
                if let Some(r) = resource {
                    resources.insert((r.api_group.clone(), r.kind.clone()));
                }
                for (object, held) in objects.into_iter().zip(held) {
                    if let Some(key) = ObjectKey::of(&object) {
                        resources.insert((key.api_version.clone(), key.kind.clone()));
                        // A deleted object cannot be listed: this is a new one of the
                        // same name, whose deletion event the broken watch missed.
                        if let Some(old) = keys.latest.get_mut(&key) {
                            old.deleted = false;
                        }
                        seen.insert(key);
                    }
                    self.applied(&mut keys, object, held);
                }
                let gone: Vec<ObjectKey> = keys
                    .latest
                    .keys()
                    .filter(|k| {
                        resources.contains(&(k.api_version.clone(), k.kind.clone()))
                            && !seen.contains(*k)
                    })
                    .cloned()
                    .collect();
                for key in gone {
                    let last = keys.latest.get(&key).and_then(|seen| seen.object.upgrade());
                    self.deleted(&mut keys, &key);
                    if let Some(object) = last {
                        self.gone(&object);
                    }
                }
            }
        }
    }

    /// Tell the [`EngineConfig::observer`] that an object went away.
    fn gone(&self, object: &Value) {
        if let Some(observer) = &self.observer {
            observer.gone(object);
        }
    }

    /// How the cache holds `object` (see [`Held`]).
    fn hold(&self, object: &Arc<Value>) -> Held {
        if self.cluster.keeps_objects() {
            Held::Weak(Arc::downgrade(object))
        } else {
            Held::Packed(pack(object))
        }
    }

    /// `object` arrived (`held` as the cache keeps it): the newest version of its key,
    /// matched unless it is busy or a version already seen.
    fn applied(&self, keys: &mut Keys, object: Arc<Value>, held: Held) {
        let Some(key) = ObjectKey::of(&object) else {
            return;
        };
        let same = keys.latest.get(&key).is_some_and(|old| {
            old.deleted || old.resource_version.as_deref() == resource_version(&object)
        });
        if same {
            return; // a version already seen (a relist or our own echo), or deleted
        }
        if let Some(observer) = &self.observer {
            observer.applied(&object);
        }
        let seen = Seen {
            reentry: keys
                .latest
                .get(&key)
                .map(|old| old.reentry)
                .unwrap_or_default(),
            resource_version: resource_version(&object).map(str::to_owned),
            object: held,
            deleted: false,
        };
        if keys.latest.insert(key.clone(), seen).is_none() {
            *keys.held.entry(resource_of(&key)).or_default() += 1;
        }
        if keys.busy.arrived(&key) {
            return;
        }
        self.schedule(keys, key, &object);
    }

    fn deleted(&self, keys: &mut Keys, key: &ObjectKey) {
        if keys.latest.remove(key).is_some()
            && let Some(n) = keys.held.get_mut(&resource_of(key))
        {
            *n = n.saturating_sub(1);
        }
        keys.busy.forget(key);
        if self.queue.cancel(key).is_some() {
            Metrics::bump(&self.metrics.stale);
        }
    }

    /// Match `object` and queue its next Stage, replacing any queued job; nothing matching
    /// cancels it. The object must not be busy.
    pub(super) fn schedule(&self, keys: &mut Keys, key: ObjectKey, object: &Arc<Value>) {
        if keys.busy.arrived(&key) {
            return;
        }
        let stages = self.stages();
        let now_wall = self.clock.now();
        let mut rng = lock(&self.rng);
        let choice = self
            .deciders
            .selector
            .select(&stages, object, &mut rng, now_wall);
        drop(rng);
        let Some(Choice { stage, delay }) = choice else {
            self.queue.cancel(&key);
            return;
        };
        let seen = keys.latest.get(&key);
        // A Stage with no delay of its own plays back to back with the last one; an
        // object caught in a loop of such plays waits longer (see `reentry`).
        let now = Instant::now();
        let matched_back_to_back = delay.is_zero().then_some(now);
        let delay = match (matched_back_to_back, seen) {
            (Some(_), Some(seen)) => seen.reentry.penalty(),
            _ => delay,
        };
        // A packed object is parsed again when the job plays: a queued job does not keep
        // its own parsed copy (100,000 pods marked for deletion at once would need a
        // gigabyte).
        let packed = seen.is_some_and(|seen| seen.packs(object));
        let job = Job {
            key: key.clone(),
            object: if packed {
                self.vacant.clone()
            } else {
                object.clone()
            },
            stage,
            step: 0,
            attempt: 0,
            due: now + delay,
            origin: 0,
            matched_back_to_back,
        };
        self.enqueue(key, job, FRESH_LANE, delay);
    }
}

/// The resource of an object.
fn resource_of(key: &ObjectKey) -> ResourceRef {
    ResourceRef {
        api_group: key.api_version.clone(),
        kind: key.kind.clone(),
    }
}

/// Counts an event as handled when dropped, after the state it changed is visible.
struct Counted<'a>(&'a AtomicU64);

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::Release);
    }
}
