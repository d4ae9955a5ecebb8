//! The engine's counters and histograms, read by `/metrics` ([`crate::serve`]): jobs
//! queued, waiting and worked per lane (the `workqueue_*` families client-go emits),
//! transitions per Stage, retries per decision, dropped jobs per cause, and the workers
//! busy right now. Everything is an atomic or a short lock taken once per job: nothing
//! is computed for a scrape that the engine does not already keep.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

use super::job::{FRESH_LANE, RETRY_LANE};

/// The lanes by number, as `/metrics` names them (`name` of the `workqueue_*` families).
pub const LANES: [(u32, &str); 2] = [(FRESH_LANE, "fresh"), (RETRY_LANE, "retry")];

/// Counters shared by the engine's tasks.
#[derive(Debug)]
pub struct Metrics {
    /// Transitions by (apiVersion, kind, Stage).
    transitions: Mutex<BTreeMap<(String, String, String), u64>>,
    /// Seconds one step took (its actions sent).
    pub step_duration: Histogram,
    retries: Labelled,
    dropped: Labelled,
    stage_status: Labelled,
    plugin_status: Labelled,
    /// Patches not sent because they would change nothing.
    pub noops: AtomicU64,
    /// Events emitted by Stages.
    pub events: AtomicU64,
    /// Writes (patch, apply, delete) that succeeded.
    pub writes: AtomicU64,
    /// Jobs skipped because a newer one replaced them or the object went away.
    pub stale: AtomicU64,
    /// Objects slowed down for playing the same Stage again and again (see
    /// [`LoopGuard`](super::LoopGuard)).
    pub slowed: AtomicU64,
    /// Failed steps queued again to retry (`workqueue_retries_total`).
    pub requeued: AtomicU64,
    /// Stage resources left out because they do not compile; set by whoever loads them.
    pub invalid_stages: AtomicU64,
    /// Per lane, indexed by lane number.
    lanes: [Lane; 2],
    /// The time base of `busy` and `last_pop`.
    base: std::time::Instant,
    /// Per worker: when its job started (nanoseconds after `base`, plus one) shifted left
    /// by one, its lane in the low bit (1: fresh); zero when idle. Lock-free: a worker
    /// writes only its own slot.
    busy: Box<[AtomicU64]>,
    /// When a worker last took a job (nanoseconds after `base`).
    last_pop: AtomicU64,
}

/// One lane's `workqueue_*` figures.
#[derive(Debug)]
pub struct Lane {
    /// Jobs added.
    pub adds: AtomicU64,
    /// Seconds from due to taken by a worker.
    pub queue_duration: Histogram,
    /// Seconds a worker played a job.
    pub work_duration: Histogram,
}

impl Default for Lane {
    fn default() -> Self {
        // client-go's buckets: 10 ns to 10 s by powers of ten.
        let buckets = || Histogram::new(exponential_buckets(1e-8, 10.0, 10));
        Self {
            adds: AtomicU64::new(0),
            queue_duration: buckets(),
            work_duration: buckets(),
        }
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            transitions: Mutex::default(),
            // Known label values start at zero, so a scrape shows them before they happen.
            retries: Labelled::starting(&[
                "backoff",
                "retry-after",
                "refresh",
                "drop",
                "drop-warn",
            ]),
            dropped: Labelled::starting(&["max-attempts", "not-found"]),
            stage_status: Labelled::starting(&["written", "unchanged", "conflict", "failed"]),
            plugin_status: Labelled::starting(&["written", "unchanged", "conflict", "failed"]),
            // 100 µs to ~100 s.
            step_duration: Histogram::new(exponential_buckets(1e-4, 4.0, 11)),
            noops: AtomicU64::new(0),
            events: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            stale: AtomicU64::new(0),
            slowed: AtomicU64::new(0),
            requeued: AtomicU64::new(0),
            invalid_stages: AtomicU64::new(0),
            lanes: [Lane::default(), Lane::default()],
            base: std::time::Instant::now(),
            busy: Box::default(),
            last_pop: AtomicU64::new(0),
        }
    }
}

#[derive(Debug, Default)]
struct Labelled(Mutex<BTreeMap<String, u64>>);

impl Labelled {
    fn starting(labels: &[&str]) -> Self {
        Self(Mutex::new(
            labels.iter().map(|l| ((*l).to_owned(), 0)).collect(),
        ))
    }

    fn inc(&self, label: &str) {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match map.get_mut(label) {
            Some(n) => *n += 1,
            None => {
                map.insert(label.to_owned(), 1);
            }
        }
    }

    fn snapshot(&self) -> BTreeMap<String, u64> {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// What the workers are doing, for the `workqueue_unfinished_work_seconds` and
/// `workqueue_longest_running_processor_seconds` of one lane.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Unfinished {
    /// Seconds of work begun and not finished, summed over the workers.
    pub total: f64,
    /// Seconds the longest-running of them has been at it.
    pub longest: f64,
}

impl Metrics {
    /// A Stage of `resource` was played to its end.
    pub fn transition(&self, resource: &crate::cluster::ResourceRef, stage: &str) {
        let mut map = self
            .transitions
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let key = (resource.api_group.as_str(), resource.kind.as_str(), stage);
        // Looked up by borrowed parts first: a String is made once per Stage.
        match map
            .iter_mut()
            .find(|((a, k, s), _)| (a.as_str(), k.as_str(), s.as_str()) == key)
        {
            Some((_, n)) => *n += 1,
            None => {
                map.insert((key.0.to_owned(), key.1.to_owned(), stage.to_owned()), 1);
            }
        }
    }

    /// A failed step was classified (`backoff`, `retry-after`, `refresh`, `drop` ...).
    pub fn retry(&self, decision: &str) {
        self.retries.inc(decision);
    }

    /// A job was dropped for `cause`.
    pub fn drop_job(&self, cause: &str) {
        self.dropped.inc(cause);
    }

    /// The figures of lane `lane` (an unknown lane counts as the retry lane).
    pub fn lane(&self, lane: u32) -> &Lane {
        &self.lanes[if lane == FRESH_LANE { 1 } else { 0 }]
    }

    /// A job was queued in `lane`.
    pub fn added(&self, lane: u32) {
        Self::bump(&self.lane(lane).adds);
    }

    fn nanos(&self, at: std::time::Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.base).as_nanos()).unwrap_or(u64::MAX)
    }

    /// Figures for `workers` workers (numbered from 0).
    pub fn with_workers(workers: usize) -> Self {
        Self {
            busy: (0..workers).map(|_| AtomicU64::new(0)).collect(),
            ..Self::default()
        }
    }

    /// Worker `worker` took a job of `lane` that was due `waited` ago.
    pub fn started(&self, worker: usize, lane: u32, waited: Duration) {
        let now = self.nanos(std::time::Instant::now());
        self.last_pop.store(now, Ordering::Relaxed);
        self.lane(lane).queue_duration.observe(waited.as_secs_f64());
        if let Some(slot) = self.busy.get(worker) {
            let fresh = u64::from(lane == FRESH_LANE);
            slot.store(((now + 1) << 1) | fresh, Ordering::Relaxed);
        }
    }

    /// Worker `worker` finished its job.
    pub fn finished(&self, worker: usize) {
        let Some(slot) = self.busy.get(worker) else {
            return;
        };
        let busy = slot.swap(0, Ordering::Relaxed);
        if busy != 0 {
            let now = self.nanos(std::time::Instant::now());
            let took = now.saturating_sub((busy >> 1) - 1) as f64 / 1e9;
            let lane = if busy & 1 == 1 {
                FRESH_LANE
            } else {
                RETRY_LANE
            };
            self.lane(lane).work_duration.observe(took);
        }
    }

    /// The work in progress in `lane`.
    pub fn unfinished(&self, lane: u32) -> Unfinished {
        let now = self.nanos(std::time::Instant::now());
        let fresh = u64::from(lane == FRESH_LANE);
        self.busy
            .iter()
            .map(|slot| slot.load(Ordering::Relaxed))
            .filter(|busy| *busy != 0 && busy & 1 == fresh)
            .map(|busy| now.saturating_sub((busy >> 1) - 1) as f64 / 1e9)
            .fold(Unfinished::default(), |u, s| Unfinished {
                total: u.total + s,
                longest: u.longest.max(s),
            })
    }

    /// How long ago a worker last took a job (since the engine started when none has).
    pub fn since_last_pop(&self) -> Duration {
        let now = self.nanos(std::time::Instant::now());
        Duration::from_nanos(now.saturating_sub(self.last_pop.load(Ordering::Relaxed)))
    }

    /// Transitions per (apiVersion, kind, Stage).
    pub fn transitions_by_resource(&self) -> BTreeMap<(String, String, String), u64> {
        self.transitions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Transitions per Stage.
    pub fn transitions(&self) -> BTreeMap<String, u64> {
        let mut by_stage = BTreeMap::new();
        for ((_, _, stage), n) in self.transitions_by_resource() {
            *by_stage.entry(stage).or_default() += n;
        }
        by_stage
    }

    /// Total transitions.
    pub fn transitions_total(&self) -> u64 {
        self.transitions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .sum()
    }

    /// Classified failures per decision (those that happened).
    pub fn retries(&self) -> BTreeMap<String, u64> {
        nonzero(self.retries.snapshot())
    }

    /// Dropped jobs per cause (those that happened).
    pub fn dropped(&self) -> BTreeMap<String, u64> {
        nonzero(self.dropped.snapshot())
    }

    /// [`Metrics::retries`], with every known decision (zero when it never happened).
    pub fn retries_with_zeros(&self) -> BTreeMap<String, u64> {
        self.retries.snapshot()
    }

    /// [`Metrics::dropped`], with every cause the engine names itself.
    pub fn dropped_with_zeros(&self) -> BTreeMap<String, u64> {
        self.dropped.snapshot()
    }

    /// A Stage resource's status was looked at: `written`, `unchanged` (it already said
    /// the same), `conflict` (the Stage changed meanwhile) or `failed`.
    pub fn stage_status(&self, result: &str) {
        self.stage_status.inc(result);
    }

    /// [`Metrics::stage_status`] by result, every result included.
    pub fn stage_statuses(&self) -> BTreeMap<String, u64> {
        self.stage_status.snapshot()
    }

    /// A StagePlugin resource's status was looked at (results as [`Metrics::stage_status`]).
    pub fn plugin_status(&self, result: &str) {
        self.plugin_status.inc(result);
    }

    /// [`Metrics::plugin_status`] by result, every result included.
    pub fn plugin_statuses(&self) -> BTreeMap<String, u64> {
        self.plugin_status.snapshot()
    }

    /// Read a plain counter.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    /// Bump a plain counter.
    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

fn nonzero(mut counts: BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    counts.retain(|_, n| *n > 0);
    counts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_buckets() {
        let m = Metrics::default();
        let pod = crate::cluster::ResourceRef {
            api_group: "v1".into(),
            kind: "Pod".into(),
        };
        let node = crate::cluster::ResourceRef {
            api_group: "v1".into(),
            kind: "Node".into(),
        };
        m.transition(&pod, "a");
        m.transition(&node, "a");
        m.transition(&pod, "b");
        let key = |k: &str, s: &str| ("v1".to_owned(), k.to_owned(), s.to_owned());
        assert_eq!(m.transitions_by_resource()[&key("Pod", "a")], 1);
        assert_eq!(m.transitions_by_resource()[&key("Node", "a")], 1);
        m.retry("backoff");
        m.drop_job("not-found");
        m.added(FRESH_LANE);
        m.added(FRESH_LANE);
        m.added(RETRY_LANE);
        assert_eq!(m.transitions()["a"], 2);
        assert_eq!(m.transitions_total(), 3);
        assert_eq!(m.retries()["backoff"], 1);
        assert_eq!(m.dropped()["not-found"], 1);
        assert!(!m.dropped().contains_key("max-attempts"));
        assert_eq!(m.dropped_with_zeros()["max-attempts"], 0);
        assert_eq!(m.retries_with_zeros()["refresh"], 0);
        assert_eq!(Metrics::get(&m.lane(FRESH_LANE).adds), 2);
        assert_eq!(Metrics::get(&m.lane(RETRY_LANE).adds), 1);
    }

    #[test]
    fn workers_busy_and_done() {
        let m = Metrics::with_workers(4);
        m.started(3, RETRY_LANE, Duration::from_millis(5));
        assert_eq!(m.unfinished(FRESH_LANE), Unfinished::default());
        let busy = m.unfinished(RETRY_LANE);
        assert!(busy.total >= 0.0 && busy.longest == busy.total, "{busy:?}");
        assert!(m.since_last_pop() < Duration::from_secs(60));
        m.finished(3);
        assert_eq!(m.unfinished(RETRY_LANE), Unfinished::default());
        let lane = m.lane(RETRY_LANE);
        assert_eq!(lane.queue_duration.count(), 1);
        assert!((lane.queue_duration.sum() - 0.005).abs() < 1e-9);
        assert_eq!(lane.work_duration.count(), 1);
        // A worker that finishes twice, or one the engine does not have, observes
        // nothing more.
        m.finished(3);
        m.started(9, FRESH_LANE, Duration::ZERO);
        m.finished(9);
        assert_eq!(lane.work_duration.count(), 1);
    }
}
