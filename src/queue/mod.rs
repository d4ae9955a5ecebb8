//! The weighted delaying queue between the matcher and the workers: it owns every pending
//! job (one per object key), its delay, its lane, and the order in which workers get them.
//!
//! ```text
//!  add(key, job, weight, delay) ──► delayed (by due time) ──due──► ready lane[weight]
//!  cancel(key) / add again ──► removes the key's job wherever it is     │
//!                                                 pop() / try_pop_due() ◄┘
//! ```
//!
//! # Jobs and keys
//! The queue holds at most one job per key. Adding a job for a key that already has one
//! **replaces** it, whether the old one is still delayed or already ready, so a stale job is
//! never popped after a newer one was added. (KWOK's delaying queue only cancels jobs that
//! are still delayed; a job that became ready stays queued and runs after its object
//! changed.) A popped job leaves the queue: a new `add` for the same key may be popped by
//! another worker while the first still runs, so holding a key in flight is the worker's
//! business.
//!
//! Add, replace, cancel and pop are O(log n) amortized: a replaced or cancelled job leaves a
//! stale ticket in the delayed heap or its lane's FIFO, skipped when it reaches the front and
//! swept out (O(n), rarely) once stale tickets outnumber live ones.
//!
//! # Lanes
//! The `weight` of a job is its lane. Ready jobs are served from the highest non-empty lane
//! first; inside a lane, by due time, then by insertion order. Put retries in a lower lane
//! than fresh work (e.g. fresh = 1, retry = 0).
//!
//! # Starvation guarantee
//! Strict priority would starve retries under a flood of fresh work (KWOK's weighted queue
//! does). The rule here, with `s` = [`QueueConfig::low_lane_share`] rounded to millionths:
//!
//! - a pop is **contended** when two or more lanes have ready jobs;
//! - each contended pop adds `s` to a credit; if the credit then reaches 1, the pop serves
//!   the **lowest**-weight non-empty ready lane and the credit drops by 1; otherwise it serves
//!   the highest-weight one;
//! - an uncontended pop serves the only ready lane and leaves the credit unchanged.
//!
//! The credit stays in `[0, 1)` between pops, so among any `n` consecutive contended pops at
//! least `⌊n·s⌋` and at most `⌈n·s⌉` serve the lowest non-empty lane. Lanes between the
//! lowest and the highest get no share: they are served when they are the highest ready lane.
//! `s = 0` is strict priority.
//!
//! # Time
//! Delays are measured with [`tokio::time::Instant`] only, so tests run under paused time.
//! A job is ready once its due time is at or before the latest `now` the queue has observed
//! (through [`WeightedQueue::add`], [`WeightedQueue::pop`] or
//! [`WeightedQueue::try_pop_due`]); it is never popped before that. A simulator with its own
//! clock drives the queue with [`WeightedQueue::add_at`] and [`WeightedQueue::try_pop_due`]
//! only, and must not mix in [`WeightedQueue::add`], which reads the tokio clock.
//!
//! One timer drives all delays: among the waiting [`WeightedQueue::pop`] calls, at most one
//! sleeps until the earliest due time; it is re-armed when an earlier job arrives. There is no
//! task or timer per job.

mod slab;
mod state;
#[cfg(test)]
mod tests;

use std::fmt;
use std::hash::Hash;
use std::pin::pin;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::{Instant, sleep_until};

use self::state::{CREDIT_SCALE, State};

/// Largest accepted [`QueueConfig::max_delay`]: one year, inside the range of tokio's timer
/// wheel (about 2.2 years).
pub const MAX_DELAY_LIMIT: Duration = Duration::from_secs(365 * 24 * 60 * 60);

/// Settings of a [`WeightedQueue`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QueueConfig {
    /// Fraction of contended pops guaranteed to the lowest-weight non-empty ready lane, in
    /// `[0, 1]` (see the module docs for the exact rule). `0` is strict priority.
    pub low_lane_share: f64,
    /// Longest delay accepted by [`WeightedQueue::add`]; longer delays are cut to it and
    /// counted in [`QueueStats::clamped`]. Far-future deadlines otherwise overflow timers
    /// (kube-rs clamps them too, issue #1772).
    pub max_delay: Duration,
}

impl Default for QueueConfig {
    /// A 20 % low-lane share (one retry per five pops under a flood of fresh work) and a
    /// 7-day maximum delay, far above KWOK's 32-minute retry backoff cap.
    fn default() -> Self {
        Self {
            low_lane_share: 0.2,
            max_delay: Duration::from_secs(7 * 24 * 60 * 60),
        }
    }
}

impl QueueConfig {
    /// Sets [`QueueConfig::low_lane_share`].
    #[must_use]
    pub fn low_lane_share(mut self, share: f64) -> Self {
        self.low_lane_share = share;
        self
    }

    /// Sets [`QueueConfig::max_delay`].
    #[must_use]
    pub fn max_delay(mut self, max_delay: Duration) -> Self {
        self.max_delay = max_delay;
        self
    }

    /// Checks the settings and returns the low-lane share in millionths of a pop.
    fn validate(&self) -> Result<u32, QueueConfigError> {
        let share = self.low_lane_share;
        if !(0.0..=1.0).contains(&share) {
            return Err(QueueConfigError::LowLaneShare(share));
        }
        if self.max_delay > MAX_DELAY_LIMIT {
            return Err(QueueConfigError::MaxDelay {
                got: self.max_delay,
                limit: MAX_DELAY_LIMIT,
            });
        }
        // In [0, CREDIT_SCALE] after the range check above; `as` saturates anyway.
        Ok((share * f64::from(CREDIT_SCALE)).round() as u32)
    }
}

/// An invalid [`QueueConfig`]. Not retryable: fix the configuration.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum QueueConfigError {
    /// `low_lane_share` is not a number in `[0, 1]`.
    #[error("queue low_lane_share must be a number in [0, 1], got {0}")]
    LowLaneShare(f64),
    /// `max_delay` is above [`MAX_DELAY_LIMIT`].
    #[error("queue max_delay must be at most {limit:?}, got {got:?}")]
    MaxDelay {
        /// The configured value.
        got: Duration,
        /// The largest accepted value.
        limit: Duration,
    },
}

/// Job counts of one lane.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaneStats {
    /// The lane's weight.
    pub weight: u32,
    /// Jobs due and waiting for a worker.
    pub ready: usize,
    /// Jobs waiting for their due time.
    pub delayed: usize,
}

/// A snapshot of a [`WeightedQueue`] for metrics. Counters count since creation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueStats {
    /// Jobs queued (ready + delayed).
    pub len: usize,
    /// Jobs on the ready side.
    pub ready: usize,
    /// Jobs on the delayed side.
    pub delayed: usize,
    /// Counts of every lane that holds a job, by ascending weight.
    pub lanes: Vec<LaneStats>,
    /// Jobs added, replacements included.
    pub added: u64,
    /// Jobs handed to a worker.
    pub popped: u64,
    /// Jobs dropped because a newer job for the same key was added.
    pub replaced: u64,
    /// Jobs removed by [`WeightedQueue::cancel`].
    pub cancelled: u64,
    /// Pops that served the lowest lane on credit instead of the highest one.
    pub low_lane_pops: u64,
    /// Delays cut to [`QueueConfig::max_delay`].
    pub clamped: u64,
    /// Whether [`WeightedQueue::close`] was called.
    pub closed: bool,
}

/// Whom an `add` must wake.
enum Wake {
    Nobody,
    /// One waiting pop: the job is ready, or no pop holds the timer yet.
    OnePopper,
    /// The pop holding the timer: the job is due before its deadline.
    TimerHolder,
}

/// A weighted delaying queue with one job per key; see the [module docs](self).
///
/// Share it between workers as `Arc<WeightedQueue<K, J>>`. All methods take `&self`; the
/// internal mutex is held for O(log n) amortized work per job, never across an `.await`.
pub struct WeightedQueue<K, J> {
    state: Mutex<State<K, J>>,
    /// Wakes a waiting pop when a job may be ready or the timer role is free.
    work: Notify,
    /// Wakes the pop holding the timer when an earlier job arrives.
    rearm: Notify,
    max_delay: Duration,
}

impl<K, J> WeightedQueue<K, J>
where
    K: Hash + Eq + Clone,
{
    /// An empty queue.
    ///
    /// # Errors
    /// [`QueueConfigError`] when `config` is out of range.
    pub fn new(config: QueueConfig) -> Result<Self, QueueConfigError> {
        let share = config.validate()?;
        Ok(Self::from_parts(share, config.max_delay))
    }

    /// A queue from validated settings.
    fn from_parts(share: u32, max_delay: Duration) -> Self {
        Self {
            state: Mutex::new(State::new(share)),
            work: Notify::new(),
            rearm: Notify::new(),
            max_delay,
        }
    }

    /// Locks the state, recovering a poisoned lock: a panic while locked can only come from
    /// `K`'s `Hash`, `Eq` or `Clone` (or a failed allocation), and one bad key must not stop
    /// every worker. The queue stays memory-safe; the job being handled may be lost.
    fn lock(&self) -> MutexGuard<'_, State<K, J>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `job` for `key` in lane `weight`, due `delay` from now (tokio clock; cut to
    /// [`QueueConfig::max_delay`]). Returns the key's previous job, which is dropped from the
    /// queue wherever it was. A zero delay makes the job ready at once.
    pub fn add(&self, key: K, job: J, weight: u32, delay: Duration) -> Option<J> {
        let now = Instant::now();
        let clamped = delay > self.max_delay;
        let delay = delay.min(self.max_delay);
        // Cannot overflow: the delay is at most a year (`MAX_DELAY_LIMIT`).
        let due = now.checked_add(delay).unwrap_or(now);
        let (old, wake) = {
            let mut state = self.lock();
            state.observe(now);
            if clamped {
                state.note_clamped();
            }
            let old = state.insert(key, job, weight, due);
            (old, wake_for(&state, due))
        };
        self.wake(wake);
        old
    }

    /// Queues `job` for `key` in lane `weight`, due at `due`, without reading the clock (for
    /// simulators; see the module docs). Returns the key's previous job, as [`Self::add`].
    pub fn add_at(&self, key: K, job: J, weight: u32, due: Instant) -> Option<J> {
        let (old, wake) = {
            let mut state = self.lock();
            let old = state.insert(key, job, weight, due);
            (old, wake_for(&state, due))
        };
        self.wake(wake);
        old
    }

    fn wake(&self, wake: Wake) {
        match wake {
            Wake::Nobody => {}
            Wake::OnePopper => self.work.notify_one(),
            Wake::TimerHolder => self.rearm.notify_waiters(),
        }
    }

    /// Removes the job queued for `key`, delayed or ready, and returns it.
    pub fn cancel(&self, key: &K) -> Option<J> {
        self.lock().remove(key)
    }

    /// Whether a job is queued for `key`.
    pub fn contains(&self, key: &K) -> bool {
        self.lock().contains(key)
    }

    /// Jobs queued (ready + delayed).
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no job is queued.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Jobs on the ready side, as of the latest observed `now` (see the module docs).
    pub fn len_ready(&self) -> usize {
        self.lock().len_ready()
    }

    /// Jobs on the delayed side, as of the latest observed `now`.
    pub fn len_delayed(&self) -> usize {
        self.lock().len_delayed()
    }

    /// Counts of lane `weight` (zero when it holds no job).
    pub fn lane(&self, weight: u32) -> LaneStats {
        self.lock().lane(weight)
    }

    /// A snapshot of counts and counters for metrics.
    pub fn stats(&self) -> QueueStats {
        self.lock().stats()
    }

    /// Due time of the earliest queued job, ready or delayed. A simulator advances its clock
    /// to it when nothing is ready.
    pub fn next_due(&self) -> Option<Instant> {
        self.lock().next_due()
    }

    /// Observes `now`, then pops the next job that is due by then, or returns `None` (also
    /// after [`Self::close`]). Never waits.
    pub fn try_pop_due(&self, now: Instant) -> Option<(K, J)> {
        let (popped, chain) = {
            let mut state = self.lock();
            if state.closed {
                return None;
            }
            let popped = state.pop_due(now);
            (popped, state.needs_waker())
        };
        if chain {
            self.work.notify_one();
        }
        popped
    }

    /// Waits for the next due job and pops it; `None` once the queue is closed.
    ///
    /// Jobs are served in the order described in the module docs. Many workers may wait at
    /// once; at most one of them sleeps on the timer.
    ///
    /// # Cancel safety
    /// This method is cancel safe: a job is removed from the queue only in the poll that
    /// returns it, so dropping the future (e.g. in `tokio::select!`) loses no job, and a
    /// dropped waiter that held the timer hands it to another waiter.
    pub async fn pop(&self) -> Option<(K, J)> {
        let mut role = Waiting {
            queue: self,
            counted: false,
            timer: false,
        };
        loop {
            let mut work = pin!(self.work.notified());
            let mut rearm = pin!(self.rearm.notified());
            // Register before looking at the state, so no wake-up between the look and the
            // wait is lost (`rearm` uses `notify_waiters`, which reaches created futures).
            work.as_mut().enable();
            let now = Instant::now();
            let deadline = {
                let mut state = self.lock();
                role.release(&mut state);
                if state.closed {
                    return None;
                }
                if let Some(popped) = state.pop_due(now) {
                    let chain = state.needs_waker();
                    drop(state);
                    if chain {
                        self.work.notify_one();
                    }
                    return Some(popped);
                }
                state.waiters += 1;
                role.counted = true;
                match state.next_delayed() {
                    Some(due) if state.timer.is_none() => {
                        state.timer = Some(due);
                        role.timer = true;
                        Some(due)
                    }
                    _ => None,
                }
            };
            match deadline {
                Some(due) => {
                    tokio::select! {
                        () = sleep_until(due) => {}
                        () = &mut work => {}
                        () = &mut rearm => {}
                    }
                }
                None => work.await,
            }
        }
    }

    /// Closes the queue: waiting and future pops return `None`. Queued jobs stay (visible in
    /// [`Self::stats`]) and `add` still accepts jobs, but nothing is popped any more.
    pub fn close(&self) {
        self.lock().closed = true;
        self.work.notify_waiters();
        self.rearm.notify_waiters();
    }

    /// Whether [`Self::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }
}

/// Decides whom to wake after inserting a job due at `due`.
fn wake_for<K, J>(state: &State<K, J>, due: Instant) -> Wake
where
    K: Hash + Eq + Clone,
{
    if state.waiters == 0 {
        return Wake::Nobody;
    }
    if state.is_ready_at(due) {
        return Wake::OnePopper;
    }
    match state.timer {
        None => Wake::OnePopper,
        Some(deadline) if due < deadline => Wake::TimerHolder,
        Some(_) => Wake::Nobody,
    }
}

impl<K, J> Default for WeightedQueue<K, J>
where
    K: Hash + Eq + Clone,
{
    /// A queue with [`QueueConfig::default`].
    fn default() -> Self {
        let config = QueueConfig::default();
        // The default configuration is valid; 0 (strict priority) is never reached.
        Self::from_parts(config.validate().unwrap_or(0), config.max_delay)
    }
}

impl<K, J> fmt::Debug for WeightedQueue<K, J>
where
    K: Hash + Eq + Clone,
{
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let stats = self.stats();
        f.debug_struct("WeightedQueue")
            .field("len", &stats.len)
            .field("ready", &stats.ready)
            .field("delayed", &stats.delayed)
            .field("closed", &stats.closed)
            .finish_non_exhaustive()
    }
}

/// What one `pop` call holds while it waits: a place in the waiter count and maybe the
/// timer role. Released when the pop wakes; when the pop is dropped while waiting, the timer
/// is handed to another waiter.
struct Waiting<'a, K, J>
where
    K: Hash + Eq + Clone,
{
    queue: &'a WeightedQueue<K, J>,
    counted: bool,
    timer: bool,
}

impl<K, J> Waiting<'_, K, J>
where
    K: Hash + Eq + Clone,
{
    fn release(&mut self, state: &mut State<K, J>) {
        if std::mem::take(&mut self.counted) {
            state.waiters = state.waiters.saturating_sub(1);
        }
        if std::mem::take(&mut self.timer) {
            state.timer = None;
        }
    }
}

impl<K, J> Drop for Waiting<'_, K, J>
where
    K: Hash + Eq + Clone,
{
    fn drop(&mut self) {
        if !self.counted && !self.timer {
            return;
        }
        let had_timer = self.timer;
        let chain = {
            let mut state = self.queue.lock();
            self.release(&mut state);
            had_timer && state.needs_waker()
        };
        if chain {
            self.queue.work.notify_one();
        }
    }
}
