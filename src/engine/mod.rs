//! The engine: watch events are matched to Stages, jobs wait in the weighted queue, and
//! workers play each Stage step by step against a [`Cluster`], retrying failed steps.
//!
//! ```text
//!  watch ─► matcher ─► queue (fresh lane) ─► worker ─► applier ─► cluster
//!  (cache)  select Stage     ▲               (exclusion)  │ step i fails
//!                            └── retry lane ◄── failure ◄──┘ (classify, Backoff::next)
//! ```
//!
//! One file a flow step, in that order: `matcher` (watch events → the object
//! `cache` → the next Stage, queued), `job` (the job and its lanes), `worker` (a
//! worker playing a job, under per-object `exclusion`), `applier` (one action sent,
//! no-op detection), `failure` (a failed step: retried, refreshed or dropped); beside
//! them [`reentry`] (the loop guard), `outage` (what the log says while the server
//! cannot be reached), [`journal`] (what `kstage sim` prints) and [`metrics`]. This file holds the engine itself: its settings, its state, start and
//! stop.
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
mod matcher;
pub mod metrics;
mod outage;
pub mod reentry;
mod worker;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};

use serde_json::Value;
use tokio::task::JoinHandle;

use crate::clock::{Clock, SystemClock};
pub use crate::cluster::Observer;
use crate::cluster::{Cluster, ObjectKey};
use crate::decide::Deciders;
use crate::queue::{QueueConfig, WeightedQueue};
use crate::retry::Backoff;
use crate::rng::Rng;
use crate::stage::{ResourceRef, Stage, StageSet};
use cache::Seen;
use exclusion::Exclusion;
pub use job::{FRESH_LANE, Job, RETRY_LANE};
pub use journal::Journal;
pub use metrics::Metrics;
pub use reentry::LoopGuard;

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
    /// (or the deletion) is on its way as a watch event. (foldhash, randomly seeded as
    /// the queue's index: faster than SipHash on object keys, which are hashed on every
    /// event and every job.)
    latest: HashMap<ObjectKey, Seen, foldhash::fast::RandomState>,
    /// Objects with a Stage running or a retry waiting.
    busy: Exclusion,
    /// How many objects of each resource `latest` holds.
    held: HashMap<ResourceRef, u64>,
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
        /// The job's [`Job::matched_back_to_back`].
        matched_back_to_back: Option<tokio::time::Instant>,
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
    /// The watched resources whose initial list has been handled.
    synced: Mutex<HashSet<ResourceRef>>,
    /// Told whenever a resource joins `synced`.
    synced_news: tokio::sync::Notify,
    /// Told whenever a Stage has been played to its end, while someone waits for it.
    played_news: tokio::sync::Notify,
    /// How many wait on `played_news` (it is not told otherwise: it takes a lock).
    played_waiters: std::sync::atomic::AtomicUsize,
    /// Worker tasks still in their loop, and news of one leaving it.
    live_workers: std::sync::atomic::AtomicUsize,
    worker_left: tokio::sync::Notify,
    metrics: Metrics,
    journal: Option<Arc<Journal>>,
    observer: Option<Arc<dyn Observer>>,
    loop_guard: LoopGuard,
    /// The API server being out of reach, for the log.
    outage: outage::Outage,
    /// The object of a queued job whose object is packed in `keys` (see `schedule`).
    vacant: Arc<Value>,
    /// Watch events handled, so a driver can tell when the engine has caught up.
    observed: AtomicU64,
}

/// Counts a worker task out when dropped.
struct WorkerLeaving<C: Cluster>(Arc<Engine<C>>);

impl<C: Cluster> Drop for WorkerLeaving<C> {
    fn drop(&mut self) {
        self.0.live_workers.fetch_sub(1, Ordering::SeqCst);
        self.0.worker_left.notify_waiters();
    }
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
            synced: Mutex::new(HashSet::new()),
            synced_news: tokio::sync::Notify::new(),
            played_news: tokio::sync::Notify::new(),
            played_waiters: std::sync::atomic::AtomicUsize::new(0),
            live_workers: std::sync::atomic::AtomicUsize::new(0),
            worker_left: tokio::sync::Notify::new(),
            metrics: Metrics::with_workers(config.workers.max(1)),
            journal: config.journal,
            observer: config.observer,
            loop_guard: config.loop_guard,
            outage: outage::Outage::default(),
            vacant: Arc::new(Value::Null),
            observed: AtomicU64::new(0),
        })
    }

    /// The cluster it plays against.
    pub fn cluster(&self) -> &Arc<C> {
        &self.cluster
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
        for worker in 0..self.workers {
            let engine = self.clone();
            self.live_workers.fetch_add(1, Ordering::SeqCst);
            tasks.push(tokio::spawn(async move {
                // Counted out however the task ends (returned, or aborted).
                let _leaving = WorkerLeaving(engine.clone());
                engine.work(worker).await;
            }));
        }
        tasks
    }

    /// Stop gracefully: no job starts after this, and every Stage being played is played
    /// to its end (so no successor replays its events); returns once every worker has
    /// left. Bound it with a timeout: a step may wait long on a slow server.
    pub async fn drain(&self) {
        self.queue.close();
        loop {
            let left = self.worker_left.notified();
            if self.live_workers.load(Ordering::SeqCst) == 0 {
                return;
            }
            left.await;
        }
    }

    /// Queue `job` in `lane` after `delay` (replacing the object's queued job), counted.
    fn enqueue(&self, key: ObjectKey, job: Job, lane: u32, delay: std::time::Duration) {
        self.metrics.added(lane);
        self.queue.add(key, job, lane, delay);
    }

    /// Stop the workers: no job starts after this; a Stage being played finishes its
    /// current request.
    pub fn shutdown(&self) {
        self.queue.close();
    }

    /// How many watch events were handled.
    pub fn observed(&self) -> u64 {
        self.observed.load(Ordering::Acquire)
    }

    /// The resources of the Stages whose initial list has not been handled yet (sorted):
    /// until it is, the objects that exist are not all known (all of them before
    /// [`Engine::start`]).
    pub fn unsynced(&self) -> Vec<ResourceRef> {
        let stages = self.stages();
        let synced = lock(&self.synced);
        let mut left: Vec<ResourceRef> = stages
            .resources()
            .filter(|r| !synced.contains(*r))
            .cloned()
            .collect();
        left.sort();
        left.dedup();
        left
    }

    /// Wait until at least `n` Stages have been played to their end.
    pub async fn wait_transitions(&self, n: u64) {
        struct Waiting<'a>(&'a std::sync::atomic::AtomicUsize);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        self.played_waiters.fetch_add(1, Ordering::SeqCst);
        let _waiting = Waiting(&self.played_waiters);
        loop {
            let news = self.played_news.notified();
            if self.metrics.transitions_total() >= n {
                return;
            }
            news.await;
        }
    }

    /// Wait until [`Engine::unsynced`] is empty.
    pub async fn wait_synced(&self) {
        loop {
            let news = self.synced_news.notified();
            if self.unsynced().is_empty() {
                return;
            }
            news.await;
        }
    }

    /// How many objects of each resource the engine holds (sorted).
    pub fn held(&self) -> Vec<(ResourceRef, u64)> {
        let mut held: Vec<(ResourceRef, u64)> = lock(&self.keys)
            .held
            .iter()
            .map(|(r, n)| (r.clone(), *n))
            .collect();
        held.sort();
        held
    }

    /// Whether nothing is queued, running or waiting to retry.
    pub fn is_idle(&self) -> bool {
        self.queue.is_empty() && lock(&self.keys).busy.is_empty()
    }
}
