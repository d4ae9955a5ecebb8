//! The engine's counters and histograms (exposed over HTTP later): jobs queued per lane,
//! transitions per Stage, retries per decision, dropped jobs per cause, due-to-applied lag.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// Upper bounds of the lag histogram's buckets, in milliseconds.
pub const LAG_BUCKETS_MS: [u64; 10] = [1, 5, 10, 50, 100, 500, 1_000, 5_000, 10_000, 60_000];

/// Counters shared by the engine's tasks.
#[derive(Debug, Default)]
pub struct Metrics {
    transitions: Labelled,
    retries: Labelled,
    dropped: Labelled,
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
    lag: Mutex<[u64; LAG_BUCKETS_MS.len() + 1]>,
}

#[derive(Debug, Default)]
struct Labelled(Mutex<BTreeMap<String, u64>>);

impl Labelled {
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

impl Metrics {
    /// A Stage was played to its end.
    pub fn transition(&self, stage: &str) {
        self.transitions.inc(stage);
    }

    /// A failed step was classified (`backoff`, `retry-after`, `refresh`, `drop` ...).
    pub fn retry(&self, decision: &str) {
        self.retries.inc(decision);
    }

    /// A job was dropped for `cause`.
    pub fn drop_job(&self, cause: &str) {
        self.dropped.inc(cause);
    }

    /// Record the time between a job being due and its Stage being applied.
    pub fn lag(&self, lag: Duration) {
        let ms = lag.as_millis() as u64;
        let bucket = LAG_BUCKETS_MS
            .iter()
            .position(|b| ms <= *b)
            .unwrap_or(LAG_BUCKETS_MS.len());
        self.lag.lock().unwrap_or_else(PoisonError::into_inner)[bucket] += 1;
    }

    /// Transitions per Stage.
    pub fn transitions(&self) -> BTreeMap<String, u64> {
        self.transitions.snapshot()
    }

    /// Total transitions.
    pub fn transitions_total(&self) -> u64 {
        self.transitions.snapshot().values().sum()
    }

    /// Classified failures per decision.
    pub fn retries(&self) -> BTreeMap<String, u64> {
        self.retries.snapshot()
    }

    /// Dropped jobs per cause.
    pub fn dropped(&self) -> BTreeMap<String, u64> {
        self.dropped.snapshot()
    }

    /// The lag histogram: counts per bucket of [`LAG_BUCKETS_MS`], then the overflow.
    pub fn lag_histogram(&self) -> Vec<u64> {
        self.lag
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .to_vec()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_buckets() {
        let m = Metrics::default();
        m.transition("a");
        m.transition("a");
        m.transition("b");
        m.retry("backoff");
        m.drop_job("not-found");
        m.lag(Duration::from_millis(3));
        m.lag(Duration::from_secs(3600));
        assert_eq!(m.transitions()["a"], 2);
        assert_eq!(m.transitions_total(), 3);
        assert_eq!(m.retries()["backoff"], 1);
        assert_eq!(m.dropped()["not-found"], 1);
        let h = m.lag_histogram();
        assert_eq!(h[1], 1);
        assert_eq!(h[LAG_BUCKETS_MS.len()], 1);
    }
}
