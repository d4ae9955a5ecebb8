//! The engine: watch events are matched to Stages, jobs wait in the weighted queue, and
//! workers play each Stage step by step against a [`Cluster`], retrying failed steps.
//!
//! ```text
//!  watch ─► observe ─► select Stage ─► queue (fresh lane) ─► worker ─► step i ─► cluster
//!                                        ▲                                │ failure
//!                                        └── retry lane ◄── classify ◄────┘
//! ```
//!
//! Rules that fix KWOK's queue:
//! - one job per object: a newer job replaces the queued one wherever it is;
//! - a failed step is retried at that same step (earlier steps, events included, are not
//!   replayed), in a lower lane that still gets a guaranteed share of the workers;
//! - while an object's Stage is running or waiting to retry, watch events only record
//!   the newest version; it is matched again when the Stage ends;
//! - two jobs for one object never run at once;
//! - when the Stage set changes, every object of an affected resource is matched again.

mod applier;
mod cache;
mod exclusion;
mod failure;
mod job;
pub mod journal;
pub mod metrics;
pub mod reentry;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::Duration;

use serde_json::Value;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::action::{self, Action, Typing};
use crate::clock::{Clock, SystemClock};
use crate::cluster::{Cluster, ClusterError, EventRequest, ObjectKey, WatchEvent};
use crate::decide::{Choice, Deciders};
use crate::queue::{QueueConfig, WeightedQueue};
use crate::retry::{Backoff, FailureKind};
use crate::rng::Rng;
use crate::stage::{ResourceRef, Stage, StageSet, Step};
use applier::Sent;
use cache::{Held, Seen, pack, resource_version};
use exclusion::{Exclusion, Popped};
pub use job::{FRESH_LANE, Job, RETRY_LANE};
pub use journal::Journal;
use journal::{Done, What};
pub use metrics::Metrics;
pub use reentry::LoopGuard;
use std::sync::atomic::{AtomicU64, Ordering};

/// How the engine runs.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// Worker tasks playing Stages concurrently.
    pub workers: usize,
    /// Retry delays and the attempt limit.
    pub backoff: Backoff,
    /// The queue (including the retry lane's share).
    pub queue: QueueConfig,
    /// Seed of the random choices (weights, jitter, backoff jitter).
    pub seed: u64,
    /// The wall clock delays are computed against (the cluster's, in tests).
    pub clock: Arc<dyn Clock>,
    /// Record every Stage played (for `kstage sim`'s timeline).
    pub journal: Option<Arc<Journal>>,
    /// Told about every new version of an object and the last state of every object that
    /// goes away (the IP pools learn nodes' pod ranges and get pods' addresses back).
    pub observer: Option<Arc<dyn Observer>>,
    /// How fast one object may play the same Stage again before it is slowed down.
    pub loop_guard: LoopGuard,
}

/// Follows the objects the engine sees.
pub trait Observer: Send + Sync + std::fmt::Debug + 'static {
    /// A new version of an object was seen.
    fn applied(&self, object: &Value);
    /// An object went away; `object` is its last state.
    fn gone(&self, object: &Value);
}

/// The address pools of a [`SimEnv`](crate::template::SimEnv) follow the nodes and pods.
impl Observer for crate::template::SimEnv {
    fn applied(&self, object: &Value) {
        self.observe(object);
    }
    fn gone(&self, object: &Value) {
        self.release(object);
    }
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            workers: 16,
            backoff: Backoff::default(),
            queue: QueueConfig::default(),
            seed: 0,
            clock: Arc::new(SystemClock),
            journal: None,
            observer: None,
            loop_guard: LoopGuard::default(),
        }
    }
}

#[derive(Debug, Default)]
struct Keys {
    /// The newest version of every watched object. A dead `Weak` means a newer version
    /// (or the deletion) is on its way as a watch event.
    latest: HashMap<ObjectKey, Seen>,
    /// Objects with a Stage running or a retry waiting.
    busy: Exclusion,
}

/// The identity the loop guard knows a Stage by.
fn stage_id(stage: &Arc<Stage>) -> usize {
    Arc::as_ptr(stage) as usize
}

/// How a job ended.
enum Outcome {
    Done {
        object: Arc<Value>,
        immediate: bool,
        stage: Arc<Stage>,
    },
    Gone,
    Dropped,
}

/// The engine over a cluster `C`.
pub struct Engine<C: Cluster> {
    cluster: Arc<C>,
    stages: RwLock<Arc<StageSet>>,
    queue: WeightedQueue<ObjectKey, Job>,
    deciders: Deciders,
    backoff: Backoff,
    workers: usize,
    clock: Arc<dyn Clock>,
    rng: Mutex<Rng>,
    keys: Mutex<Keys>,
    watched: Mutex<HashSet<ResourceRef>>,
    metrics: Metrics,
    journal: Option<Arc<Journal>>,
    observer: Option<Arc<dyn Observer>>,
    loop_guard: LoopGuard,
    /// The object of a queued job whose object is packed in `keys` (see `schedule`).
    vacant: Arc<Value>,
    /// Watch events handled, so a driver can tell when the engine has caught up.
    observed: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl<C: Cluster> Engine<C> {
    /// An engine playing `stages` on `cluster` with kstage's built-in selection,
    /// rendering and classification.
    pub fn new(cluster: Arc<C>, stages: StageSet, config: EngineConfig) -> Arc<Self> {
        Self::with_deciders(cluster, stages, config, Deciders::default())
    }

    /// An engine whose selection, rendering and classification are `deciders`
    /// (plugins, or anything else implementing [`crate::decide`]'s traits).
    pub fn with_deciders(
        cluster: Arc<C>,
        stages: StageSet,
        config: EngineConfig,
        deciders: Deciders,
    ) -> Arc<Self> {
        let queue = WeightedQueue::new(config.queue).unwrap_or_else(|e| {
            tracing::error!(error = %e, "invalid queue settings; using the defaults");
            WeightedQueue::default()
        });
        Arc::new(Self {
            cluster,
            stages: RwLock::new(Arc::new(stages)),
            queue,
            deciders,
            backoff: config.backoff,
            workers: config.workers.max(1),
            clock: config.clock,
            rng: Mutex::new(Rng::seeded(config.seed)),
            keys: Mutex::new(Keys::default()),
            watched: Mutex::new(HashSet::new()),
            metrics: Metrics::default(),
            journal: config.journal,
            observer: config.observer,
            loop_guard: config.loop_guard,
            vacant: Arc::new(Value::Null),
            observed: AtomicU64::new(0),
        })
    }

    /// The counters.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// The queue (for its statistics).
    pub fn queue(&self) -> &WeightedQueue<ObjectKey, Job> {
        &self.queue
    }

    /// The Stages in use.
    pub fn stages(&self) -> Arc<StageSet> {
        self.stages
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Start watching every resource the Stages name and the worker tasks. Stop them with
    /// [`Engine::shutdown`].
    pub fn start(self: &Arc<Self>) -> Vec<JoinHandle<()>> {
        let mut tasks = self.watch_new_resources();
        for _ in 0..self.workers {
            let engine = self.clone();
            tasks.push(tokio::spawn(async move { engine.work().await }));
        }
        tasks
    }

    /// Stop the workers: no job starts after this; a Stage being played finishes its
    /// current request.
    pub fn shutdown(&self) {
        self.queue.close();
    }

    fn watch_new_resources(self: &Arc<Self>) -> Vec<JoinHandle<()>> {
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
                    engine.observe_from(Some(&resource), event);
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

    /// How many watch events were handled.
    pub fn observed(&self) -> u64 {
        self.observed.load(Ordering::Acquire)
    }

    /// Whether nothing is queued, running or waiting to retry.
    pub fn is_idle(&self) -> bool {
        self.queue.is_empty() && lock(&self.keys).busy.is_empty()
    }

    /// Handle one watch event.
    pub fn observe(&self, event: WatchEvent) {
        self.observe_from(None, event);
    }

    /// Handle one watch event of `resource`'s watch: a restart then also forgets the
    /// objects of that resource when it lists none at all.
    pub fn observe_from(&self, resource: Option<&ResourceRef>, event: WatchEvent) {
        let _counted = Counted(&self.observed);
        let mut keys = lock(&self.keys);
        match event {
            WatchEvent::Applied(object) => self.applied(&mut keys, object),
            WatchEvent::Deleted(object) => {
                if let Some(key) = ObjectKey::of(&object) {
                    self.deleted(&mut keys, &key);
                }
                self.gone(&object);
            }
            WatchEvent::Restarted(objects) => {
                let mut seen = HashSet::new();
                let mut resources = HashSet::new();
                if let Some(r) = resource {
                    resources.insert((r.api_group.clone(), r.kind.clone()));
                }
                for object in objects {
                    if let Some(key) = ObjectKey::of(&object) {
                        resources.insert((key.api_version.clone(), key.kind.clone()));
                        seen.insert(key);
                    }
                    self.applied(&mut keys, object);
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

    fn applied(&self, keys: &mut Keys, object: Arc<Value>) {
        let Some(key) = ObjectKey::of(&object) else {
            return;
        };
        let same = keys
            .latest
            .get(&key)
            .is_some_and(|old| old.resource_version.as_deref() == resource_version(&object));
        if same {
            return; // a version already seen (a relist or our own echo)
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
            object: if self.cluster.keeps_objects() {
                Held::Weak(Arc::downgrade(&object))
            } else {
                Held::Packed(pack(&object))
            },
        };
        keys.latest.insert(key.clone(), seen);
        if keys.busy.arrived(&key) {
            return;
        }
        self.schedule(keys, key, &object);
    }

    fn deleted(&self, keys: &mut Keys, key: &ObjectKey) {
        keys.latest.remove(key);
        keys.busy.forget(key);
        if self.queue.cancel(key).is_some() {
            Metrics::bump(&self.metrics.stale);
        }
    }

    /// Match `object` and queue its next Stage, replacing any queued job; nothing matching
    /// cancels it. The object must not be busy.
    fn schedule(&self, keys: &mut Keys, key: ObjectKey, object: &Arc<Value>) {
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
        // An object caught in a loop on this Stage waits longer (see `reentry`).
        let delay = delay
            + seen.map_or(Duration::ZERO, |seen| {
                seen.reentry.penalty(stage_id(&stage))
            });
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
            due: Instant::now() + delay,
        };
        self.queue.add(key, job, FRESH_LANE, delay);
    }

    async fn work(self: Arc<Self>) {
        while let Some((_, job)) = self.queue.pop().await {
            let popped = lock(&self.keys).busy.popped(job);
            if let Popped::Run(job) = popped {
                self.play(job).await;
            }
        }
    }

    async fn play(&self, mut job: Job) {
        let key = job.key.clone();
        self.metrics
            .lag(Instant::now().saturating_duration_since(job.due));
        if job.step == 0 && job.attempt == 0 {
            // A fresh job renders the newest version; it is stale if that no longer
            // matches its Stage (a newer job replaces it, or none is due).
            let latest = lock(&self.keys)
                .latest
                .get(&key)
                .map(|seen| seen.latest(&job.object));
            let latest = latest.map(|l| l.get().unwrap_or_else(|| job.object.clone()));
            let Some(latest) = latest else {
                Metrics::bump(&self.metrics.stale);
                self.finish(&key, Outcome::Gone);
                return;
            };
            if !job.stage.selector.matches(&latest) {
                Metrics::bump(&self.metrics.stale);
                self.finish(&key, Outcome::Dropped);
                return;
            }
            job.object = latest;
        }
        let stage = job.stage.clone();
        let span =
            tracing::debug_span!("stage", object = %key, stage = %stage.name, retry = job.attempt);
        let _enter = span.enter();
        let mut deleted = false;
        let mut done = Vec::new();
        for index in job.step..stage.steps.len() {
            if deleted && !matches!(stage.steps[index], Step::Event(_)) {
                continue;
            }
            let renderer = &*self.deciders.renderer;
            let actions =
                match action::step_actions(&stage, index, &job.object, Typing::Typed, renderer) {
                    Ok(actions) => actions,
                    Err(e) => {
                        job.step = index;
                        let error = ClusterError {
                            kind: if e.is_plugin() {
                                FailureKind::Plugin
                            } else {
                                FailureKind::Template
                            },
                            status: None,
                            reason: e
                                .is_exhausted()
                                .then(|| crate::retry::REASON_EXHAUSTED.to_owned()),
                            message: e.to_string(),
                            retry_after: None,
                        };
                        self.fail(job, error, done).await;
                        return;
                    }
                };
            for action in actions {
                let before = resource_version(&job.object).map(str::to_owned);
                let kind = action.kind();
                let is_patch = matches!(action, Action::Patch { .. });
                let detail = self.journal.as_ref().map(|_| action.summary());
                // Where the cluster is in this process, let go of the object while writing
                // it, so the store (then its only holder) can move it instead of copying.
                // (Not once it is gone: only events follow then.)
                let cheap = self.cluster.cheap_noop_writes() && !deleted;
                let held = Arc::downgrade(&job.object);
                if cheap {
                    job.object = Arc::default();
                }
                let sent = self.send(&key, &job.object, action).await;
                if cheap && matches!(sent, Ok(Sent::Nothing) | Err(_)) {
                    match held.upgrade() {
                        Some(object) => job.object = object,
                        None => {
                            // Changed or deleted by someone else meanwhile: a watch event
                            // brings the news; this job is stale.
                            Metrics::bump(&self.metrics.stale);
                            self.finish(&key, Outcome::Dropped);
                            return;
                        }
                    }
                }
                let changed = match sent {
                    Ok(Sent::Object(object)) => {
                        let changed = resource_version(&object) != before.as_deref();
                        if !changed && is_patch {
                            Metrics::bump(&self.metrics.noops);
                        }
                        job.object = object;
                        changed
                    }
                    Ok(Sent::Gone) => {
                        deleted = true;
                        true
                    }
                    Ok(Sent::Nothing) => false,
                    Err(error) => {
                        job.step = index;
                        self.fail(job, error, done).await;
                        return;
                    }
                };
                if let Some(detail) = detail {
                    done.push(Done {
                        kind,
                        detail,
                        changed,
                    });
                }
            }
        }
        self.metrics.transition(&stage.name);
        if let Some(journal) = &self.journal {
            let what = What::Stage {
                name: stage.name.clone(),
                actions: done,
                error: None,
            };
            journal.record(key.clone(), what);
        }
        let outcome = if deleted {
            Outcome::Gone
        } else {
            Outcome::Done {
                object: job.object.clone(),
                immediate: stage.immediate_next_stage,
                stage: stage.clone(),
            }
        };
        if self.finish(&key, outcome) {
            self.slowed_down(&key, &stage).await;
        }
    }

    /// Say once that `key` was slowed down by the loop guard for playing `stage` again and
    /// again: a warning in the log and a Warning Event on the object.
    async fn slowed_down(&self, key: &ObjectKey, stage: &Stage) {
        let guard = &self.loop_guard;
        let message = format!(
            "kstage: Stage {} played more than {} times within {:?} (does its output still match it?): slowed down to one play per {:?}, doubling up to {:?}",
            stage.name, guard.burst, guard.window, guard.window, guard.max_delay,
        );
        tracing::warn!(object = %key, stage = %stage.name, "{message}");
        let event = EventRequest {
            event_type: "Warning".to_owned(),
            reason: "StageLoop".to_owned(),
            message,
        };
        if let Err(e) = self.cluster.event(key, &event).await {
            tracing::warn!(object = %key, error = %e, "cannot record the Warning event");
        }
    }

    /// A job ended: free the object and match its newest version if needed. True when
    /// the loop guard slowed the object down just now (the caller says so).
    fn finish(&self, key: &ObjectKey, outcome: Outcome) -> bool {
        let mut keys = lock(&self.keys);
        let Some(ended) = keys.busy.ended(key) else {
            return false; // deleted meanwhile
        };
        let slowed = match (&outcome, keys.latest.get_mut(key)) {
            (Outcome::Done { stage, .. }, Some(seen)) => {
                seen.reentry
                    .played(stage_id(stage), Instant::now(), &self.loop_guard)
            }
            _ => false,
        };
        if slowed {
            Metrics::bump(&self.metrics.slowed);
        }
        // What to match next, newest first: a version that arrived while the Stage ran,
        // the object an `immediateNextStage` Stage wrote, or a job popped meanwhile.
        // Nothing when the object is gone (or a newer version is on its way). A packed
        // version is parsed only when it is matched and is not the one the Stage wrote
        // (usually it is: the watch's echo of this job's own write).
        let next = match (outcome, keys.latest.get(key)) {
            (Outcome::Gone, _) | (_, None) => None,
            (Outcome::Done { object, .. }, Some(seen)) if ended.dirty => seen.latest(&object).get(),
            (Outcome::Dropped, Some(seen)) if ended.dirty => seen.object.upgrade(),
            (
                Outcome::Done {
                    object,
                    immediate: true,
                    ..
                },
                Some(seen),
            ) => seen.object.is_live().then_some(object),
            _ => None,
        };
        match (next, ended.pending) {
            (Some(object), _) => self.schedule(&mut keys, key.clone(), &object),
            (None, Some(pending)) => {
                let lane = pending.lane();
                self.queue.add(key.clone(), pending, lane, Duration::ZERO);
            }
            (None, None) => {}
        }
        slowed
    }
}

/// Counts an event as handled when dropped, after the state it changed is visible.
struct Counted<'a>(&'a AtomicU64);

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::Release);
    }
}
