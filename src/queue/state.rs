//! The synchronous core of the queue: one pending job per key, a delayed index, ready lanes
//! and the low-lane credit. No locking, no clock reads, no waking: [`super::WeightedQueue`]
//! wraps it in a mutex and drives it.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;

use tokio::time::Instant;

use super::{LaneStats, QueueStats};

/// Fixed-point scale of the low-lane credit: one pop's worth of credit.
pub(super) const CREDIT_SCALE: u32 = 1_000_000;

/// Position of a job in the indexes: its due time, then its insertion sequence number.
/// Unique per job, so it orders a lane FIFO by due time, then by insertion.
type Pos = (Instant, u64);

/// A queued job and where it is indexed.
#[derive(Debug)]
struct Slot<J> {
    job: J,
    weight: u32,
    pos: Pos,
}

/// Monotonic counters exported by [`QueueStats`].
#[derive(Debug, Default, Clone, Copy)]
struct Counters {
    added: u64,
    popped: u64,
    replaced: u64,
    cancelled: u64,
    low_lane_pops: u64,
    clamped: u64,
}

/// The queue state behind the mutex.
///
/// Invariant (the *watermark rule*): a job is on the ready side iff its due time is at or
/// before `watermark`, the latest `now` the queue has been told about. `watermark` only moves
/// forward, and moving it promotes every delayed job that became due, so the side of a job
/// follows from its due time alone.
#[derive(Debug)]
pub(super) struct State<K, J> {
    /// Every queued job, by key: the single source of truth for "one job per key".
    slots: HashMap<K, Slot<J>>,
    /// Delayed jobs across all lanes, earliest first. The value is `(weight, key)`.
    delayed: BTreeMap<Pos, (u32, K)>,
    /// Delayed job count per lane; lanes with none are absent.
    delayed_per_lane: BTreeMap<u32, usize>,
    /// Ready jobs per lane, FIFO by position; empty lanes are absent, so the first and last
    /// entries are the lowest and highest non-empty lanes.
    ready: BTreeMap<u32, BTreeMap<Pos, K>>,
    ready_len: usize,
    /// Latest `now` observed; `None` until the first observation.
    watermark: Option<Instant>,
    /// Next insertion sequence number.
    seq: u64,
    /// Low-lane share in millionths of a pop.
    share: u32,
    /// Accumulated low-lane credit in millionths of a pop; always below [`CREDIT_SCALE`]
    /// between pops.
    credit: u32,
    counters: Counters,
    /// Set by `close`: pops return `None` from then on.
    pub(super) closed: bool,
    /// Deadline of the pop currently holding the timer role, if any (see `WeightedQueue::pop`).
    pub(super) timer: Option<Instant>,
}

impl<K, J> State<K, J>
where
    K: Hash + Eq + Clone,
{
    /// An empty state that gives the lowest ready lane `share` millionths of contended pops.
    pub(super) fn new(share: u32) -> Self {
        Self {
            slots: HashMap::new(),
            delayed: BTreeMap::new(),
            delayed_per_lane: BTreeMap::new(),
            ready: BTreeMap::new(),
            ready_len: 0,
            watermark: None,
            seq: 0,
            share: share.min(CREDIT_SCALE),
            credit: 0,
            counters: Counters::default(),
            closed: false,
            timer: None,
        }
    }

    /// Moves the watermark to `now` (never backwards) and promotes every delayed job whose
    /// due time is at or before it.
    pub(super) fn observe(&mut self, now: Instant) {
        let mark = match self.watermark {
            Some(mark) if mark >= now => return,
            _ => now,
        };
        self.watermark = Some(mark);
        while let Some(entry) = self.delayed.first_entry() {
            if entry.key().0 > mark {
                break;
            }
            let (pos, (weight, key)) = entry.remove_entry();
            decrement(&mut self.delayed_per_lane, weight);
            self.ready.entry(weight).or_default().insert(pos, key);
            self.ready_len += 1;
        }
    }

    /// Whether a job due at `due` belongs on the ready side now.
    pub(super) fn is_ready_at(&self, due: Instant) -> bool {
        self.watermark.is_some_and(|mark| due <= mark)
    }

    /// Queues `job` for `key` in lane `weight`, due at `due`, replacing (and returning) the
    /// key's previous job wherever it was.
    pub(super) fn insert(&mut self, key: K, job: J, weight: u32, due: Instant) -> Option<J> {
        let pos = (due, self.seq);
        self.seq += 1;
        self.counters.added += 1;
        if self.is_ready_at(due) {
            self.ready
                .entry(weight)
                .or_default()
                .insert(pos, key.clone());
            self.ready_len += 1;
        } else {
            self.delayed.insert(pos, (weight, key.clone()));
            *self.delayed_per_lane.entry(weight).or_default() += 1;
        }
        let old = self.slots.insert(key, Slot { job, weight, pos })?;
        self.unindex(old.weight, old.pos);
        self.counters.replaced += 1;
        Some(old.job)
    }

    /// Counts a delay cut down to the configured maximum.
    pub(super) fn note_clamped(&mut self) {
        self.counters.clamped += 1;
    }

    /// Removes the job queued for `key`, if any.
    pub(super) fn remove(&mut self, key: &K) -> Option<J> {
        let old = self.slots.remove(key)?;
        self.unindex(old.weight, old.pos);
        self.counters.cancelled += 1;
        Some(old.job)
    }

    /// Removes a job's index entry (not its slot), on whichever side it is.
    fn unindex(&mut self, weight: u32, pos: Pos) {
        if self.is_ready_at(pos.0) {
            if let Some(lane) = self.ready.get_mut(&weight)
                && lane.remove(&pos).is_some()
            {
                self.ready_len -= 1;
                if lane.is_empty() {
                    self.ready.remove(&weight);
                }
            }
        } else if self.delayed.remove(&pos).is_some() {
            decrement(&mut self.delayed_per_lane, weight);
        }
    }

    /// Pops the next ready job after observing `now`; see the module docs for the lane rule.
    pub(super) fn pop_due(&mut self, now: Instant) -> Option<(K, J)> {
        self.observe(now);
        let weight = self.pick_lane()?;
        let lane = self.ready.get_mut(&weight)?;
        let (_, key) = lane.pop_first()?;
        if lane.is_empty() {
            self.ready.remove(&weight);
        }
        self.ready_len -= 1;
        let slot = self.slots.remove(&key)?;
        self.counters.popped += 1;
        Some((key, slot.job))
    }

    /// Chooses the lane to serve: the highest non-empty ready lane, except that each
    /// contended pop (two or more non-empty ready lanes) earns `share` credit, and a pop that
    /// brings the credit to one whole pop serves the lowest non-empty ready lane instead.
    fn pick_lane(&mut self) -> Option<u32> {
        let (&highest, _) = self.ready.last_key_value()?;
        let (&lowest, _) = self.ready.first_key_value()?;
        if highest == lowest {
            return Some(highest);
        }
        self.credit += self.share;
        if self.credit >= CREDIT_SCALE {
            self.credit -= CREDIT_SCALE;
            self.counters.low_lane_pops += 1;
            Some(lowest)
        } else {
            Some(highest)
        }
    }

    /// Due time of the earliest delayed job.
    pub(super) fn next_delayed(&self) -> Option<Instant> {
        self.delayed.first_key_value().map(|(pos, _)| pos.0)
    }

    /// Due time of the earliest job on either side.
    pub(super) fn next_due(&self) -> Option<Instant> {
        let ready = self
            .ready
            .values()
            .filter_map(|lane| lane.first_key_value().map(|(pos, _)| pos.0))
            .min();
        match (ready, self.next_delayed()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Whether a popper that just returned should wake another: there is ready work left,
    /// or delayed work with no pop holding the timer.
    pub(super) fn needs_waker(&self) -> bool {
        self.ready_len > 0 || (self.timer.is_none() && !self.delayed.is_empty())
    }

    pub(super) fn contains(&self, key: &K) -> bool {
        self.slots.contains_key(key)
    }

    pub(super) fn len(&self) -> usize {
        self.slots.len()
    }

    pub(super) fn len_ready(&self) -> usize {
        self.ready_len
    }

    pub(super) fn len_delayed(&self) -> usize {
        self.delayed.len()
    }

    /// Counts of one lane.
    pub(super) fn lane(&self, weight: u32) -> LaneStats {
        LaneStats {
            weight,
            ready: self.ready.get(&weight).map_or(0, BTreeMap::len),
            delayed: self.delayed_per_lane.get(&weight).copied().unwrap_or(0),
        }
    }

    /// A snapshot of the counts and counters.
    pub(super) fn stats(&self) -> QueueStats {
        let mut weights: Vec<u32> = self
            .ready
            .keys()
            .chain(self.delayed_per_lane.keys())
            .copied()
            .collect();
        weights.sort_unstable();
        weights.dedup();
        let Counters {
            added,
            popped,
            replaced,
            cancelled,
            low_lane_pops,
            clamped,
        } = self.counters;
        QueueStats {
            len: self.len(),
            ready: self.ready_len,
            delayed: self.delayed.len(),
            lanes: weights.into_iter().map(|w| self.lane(w)).collect(),
            added,
            popped,
            replaced,
            cancelled,
            low_lane_pops,
            clamped,
            closed: self.closed,
        }
    }
}

/// Decrements a per-lane count, dropping the lane at zero.
fn decrement(counts: &mut BTreeMap<u32, usize>, weight: u32) {
    if let Some(n) = counts.get_mut(&weight) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            counts.remove(&weight);
        }
    }
}
