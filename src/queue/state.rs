//! The synchronous core of the queue: one pending job per key, the delayed index, the ready
//! lanes and the low-lane credit. No locking, no clock reads, no waking:
//! [`super::WeightedQueue`] wraps it in a mutex and drives it.
//!
//! Jobs live in a [`Slab`]; the key index maps a key to its slot. The delayed side is a
//! binary heap and each ready lane a FIFO, both of *tickets* (due time, sequence number,
//! slot). Replacing or cancelling a job frees or renumbers its slot, which turns its ticket
//! stale in O(1); stale tickets are skipped when they reach the front and swept out once they
//! outnumber the live ones, so every operation is O(log n) amortized.

use std::cmp::Reverse;
use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, BinaryHeap, HashMap, VecDeque};
use std::hash::Hash;

use tokio::time::Instant;

use super::slab::Slab;
use super::{LaneStats, QueueStats};

/// Fixed-point scale of the low-lane credit: one pop's worth of credit.
pub(super) const CREDIT_SCALE: u32 = 1_000_000;

/// Stale tickets tolerated in an index before a sweep: at least this many, and more than the
/// live ones. Small under test, so the property tests sweep often.
const SWEEP_MIN: usize = if cfg!(test) { 4 } else { 64 };

/// A job's place in an index. Ordered by due time, then sequence number; the sequence number
/// is unique per added job, so it also tells a live ticket from a stale one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Ticket {
    due: Instant,
    seq: u64,
    slot: usize,
}

/// Which index holds a job's live ticket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Delayed,
    /// The lane's FIFO (tickets that arrived in order).
    Fifo,
    /// The lane's ordered map (tickets that arrived out of order).
    Early,
}

/// A queued job.
#[derive(Debug)]
struct Slot<K, J> {
    key: K,
    job: J,
    weight: u32,
    due: Instant,
    seq: u64,
    place: Place,
}

fn is_live<K, J>(slab: &Slab<Slot<K, J>>, ticket: &Ticket) -> bool {
    slab.get(ticket.slot)
        .is_some_and(|slot| slot.seq == ticket.seq)
}

/// A FIFO ticket: the due time is read from the (live) slot, which halves the FIFO's
/// memory traffic.
#[derive(Debug, Clone, Copy)]
struct FifoTicket {
    seq: u64,
    slot: usize,
}

impl FifoTicket {
    /// The full ticket, if still live.
    fn live<K, J>(self, slab: &Slab<Slot<K, J>>) -> Option<Ticket> {
        let slot = slab.get(self.slot)?;
        (slot.seq == self.seq).then_some(Ticket {
            due: slot.due,
            seq: self.seq,
            slot: self.slot,
        })
    }
}

/// The ready jobs of one lane, in `(due, seq)` order.
///
/// Jobs reach the ready side almost always in order (promotion goes by due time, and a job
/// added ready is due at the latest observed instant), so they go to a FIFO. A job due
/// before the FIFO's back (added with a due time in the past) goes to `early` instead.
#[derive(Debug, Default)]
struct Lane {
    fifo: VecDeque<FifoTicket>,
    /// `(due, seq)` of the FIFO's last ticket, live or stale.
    back: Option<(Instant, u64)>,
    early: BTreeMap<(Instant, u64), usize>,
    live: usize,
    stale: usize,
}

impl Lane {
    fn push(&mut self, ticket: Ticket) -> Place {
        self.live += 1;
        let key = (ticket.due, ticket.seq);
        if self.fifo.is_empty() || self.back.is_none_or(|back| back <= key) {
            self.fifo.push_back(FifoTicket {
                seq: ticket.seq,
                slot: ticket.slot,
            });
            self.back = Some(key);
            Place::Fifo
        } else {
            self.early.insert((ticket.due, ticket.seq), ticket.slot);
            Place::Early
        }
    }

    /// The first live ticket, after dropping stale ones from the FIFO's front.
    fn first<K, J>(&mut self, slab: &Slab<Slot<K, J>>) -> Option<(Ticket, Place)> {
        let mut fifo = None;
        while let Some(front) = self.fifo.front() {
            fifo = front.live(slab);
            if fifo.is_some() {
                break;
            }
            self.fifo.pop_front();
            self.stale = self.stale.saturating_sub(1);
        }
        let early = self
            .early
            .first_key_value()
            .map(|(&(due, seq), &slot)| Ticket { due, seq, slot });
        match (fifo, early) {
            (Some(f), Some(e)) if e < f => Some((e, Place::Early)),
            (Some(f), _) => Some((f, Place::Fifo)),
            (None, e) => e.map(|e| (e, Place::Early)),
        }
    }

    /// Removes the first live ticket and returns its slot.
    fn pop<K, J>(&mut self, slab: &Slab<Slot<K, J>>) -> Option<usize> {
        let (ticket, place) = self.first(slab)?;
        match place {
            Place::Early => self.early.remove(&(ticket.due, ticket.seq)),
            _ => self.fifo.pop_front().map(|t| t.slot),
        }?;
        self.live -= 1;
        Some(ticket.slot)
    }

    /// Drops a live ticket: marks it stale in the FIFO, removes it from `early`.
    fn unlink(&mut self, due: Instant, seq: u64, place: Place) {
        self.live = self.live.saturating_sub(1);
        match place {
            Place::Early => {
                self.early.remove(&(due, seq));
            }
            _ => self.stale += 1,
        }
    }

    /// Sweeps stale tickets out of the FIFO once they outnumber the live ones.
    fn sweep<K, J>(&mut self, slab: &Slab<Slot<K, J>>) {
        if self.stale > SWEEP_MIN && self.stale > self.live {
            self.fifo.retain(|ticket| ticket.live(slab).is_some());
            self.stale = 0;
        }
    }
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
/// forward, and moving it promotes every delayed job that became due.
#[derive(Debug)]
pub(super) struct State<K, J> {
    /// Key → slot: the single source of truth for "one job per key".
    /// Key → slot. foldhash (seeded per queue) rather than SipHash: ~25 ns less per
    /// operation on object keys, still randomised against crafted collisions.
    index: HashMap<K, usize, foldhash::fast::RandomState>,
    slab: Slab<Slot<K, J>>,
    /// Delayed tickets, earliest first; may hold stale tickets.
    delayed: BinaryHeap<Reverse<Ticket>>,
    delayed_stale: usize,
    /// Delayed job count per lane; lanes with none are absent.
    delayed_per_lane: BTreeMap<u32, usize>,
    /// Ready jobs per lane; lanes with no live ready job are absent, so the first and last
    /// entries are the lowest and highest non-empty lanes.
    lanes: BTreeMap<u32, Lane>,
    ready_len: usize,
    /// Latest `now` observed; `None` until the first observation.
    watermark: Option<Instant>,
    /// Next sequence number.
    seq: u64,
    /// Low-lane share in millionths of a pop.
    share: u32,
    /// Accumulated low-lane credit in millionths of a pop; below [`CREDIT_SCALE`] between
    /// pops.
    credit: u32,
    counters: Counters,
    /// Set by `close`: pops return `None` from then on.
    pub(super) closed: bool,
    /// Deadline of the pop holding the timer role, if any (see `WeightedQueue::pop`).
    pub(super) timer: Option<Instant>,
    /// Pops currently waiting (registered for a wake-up).
    pub(super) waiters: usize,
}

impl<K, J> State<K, J>
where
    K: Hash + Eq + Clone,
{
    /// An empty state that gives the lowest ready lane `share` millionths of contended pops.
    pub(super) fn new(share: u32) -> Self {
        Self {
            index: HashMap::default(),
            slab: Slab::new(),
            delayed: BinaryHeap::new(),
            delayed_stale: 0,
            delayed_per_lane: BTreeMap::new(),
            lanes: BTreeMap::new(),
            ready_len: 0,
            watermark: None,
            seq: 0,
            share: share.min(CREDIT_SCALE),
            credit: 0,
            counters: Counters::default(),
            closed: false,
            timer: None,
            waiters: 0,
        }
    }

    /// Moves the watermark to `now` (never backwards) and promotes every delayed job whose
    /// due time is at or before it.
    pub(super) fn observe(&mut self, now: Instant) {
        if self.watermark.is_some_and(|mark| mark >= now) {
            return;
        }
        self.watermark = Some(now);
        while let Some(ticket) = self.first_delayed() {
            if ticket.due > now {
                break;
            }
            self.delayed.pop();
            let Some(slot) = self.slab.get_mut(ticket.slot) else {
                continue;
            };
            decrement(&mut self.delayed_per_lane, slot.weight);
            slot.place = self.lanes.entry(slot.weight).or_default().push(ticket);
            self.ready_len += 1;
        }
    }

    /// The earliest live delayed ticket, after dropping stale ones from the top.
    fn first_delayed(&mut self) -> Option<Ticket> {
        while let Some(Reverse(top)) = self.delayed.peek() {
            if is_live(&self.slab, top) {
                return Some(*top);
            }
            self.delayed.pop();
            self.delayed_stale = self.delayed_stale.saturating_sub(1);
        }
        None
    }

    /// Whether a job due at `due` belongs on the ready side now.
    pub(super) fn is_ready_at(&self, due: Instant) -> bool {
        self.watermark.is_some_and(|mark| due <= mark)
    }

    /// Counts a delay cut down to the configured maximum.
    pub(super) fn note_clamped(&mut self) {
        self.counters.clamped += 1;
    }

    /// Queues `job` for `key` in lane `weight`, due at `due`, replacing (and returning) the
    /// key's previous job wherever it was.
    pub(super) fn insert(&mut self, key: K, job: J, weight: u32, due: Instant) -> Option<J> {
        let seq = self.seq;
        self.seq += 1;
        self.counters.added += 1;
        let (index, old) = match self.index.entry(key) {
            Entry::Vacant(vacant) => {
                let index = self.slab.insert(Slot {
                    key: vacant.key().clone(),
                    job,
                    weight,
                    due,
                    seq,
                    place: Place::Delayed,
                });
                vacant.insert(index);
                (index, None)
            }
            Entry::Occupied(occupied) => {
                let index = *occupied.get();
                self.unlink(index);
                let slot = self.slab.get_mut(index)?;
                let old_weight = std::mem::replace(&mut slot.weight, weight);
                slot.due = due;
                slot.seq = seq;
                let old = std::mem::replace(&mut slot.job, job);
                self.counters.replaced += 1;
                self.sweep(old_weight);
                (index, Some(old))
            }
        };
        let ticket = Ticket {
            due,
            seq,
            slot: index,
        };
        let place = if self.is_ready_at(due) {
            self.ready_len += 1;
            self.lanes.entry(weight).or_default().push(ticket)
        } else {
            self.delayed.push(Reverse(ticket));
            *self.delayed_per_lane.entry(weight).or_default() += 1;
            Place::Delayed
        };
        if let Some(slot) = self.slab.get_mut(index) {
            slot.place = place;
        }
        old
    }

    /// Removes the job queued for `key`, if any.
    pub(super) fn remove(&mut self, key: &K) -> Option<J> {
        let index = self.index.remove(key)?;
        self.unlink(index);
        let slot = self.slab.remove(index)?;
        self.sweep(slot.weight);
        self.counters.cancelled += 1;
        Some(slot.job)
    }

    /// Takes a job's live ticket out of the counts; the ticket itself turns stale once the
    /// slot is freed or renumbered (an `early` ticket is removed at once).
    fn unlink(&mut self, index: usize) {
        let Some(slot) = self.slab.get(index) else {
            return;
        };
        match slot.place {
            Place::Delayed => {
                self.delayed_stale += 1;
                decrement(&mut self.delayed_per_lane, slot.weight);
            }
            place => {
                self.ready_len = self.ready_len.saturating_sub(1);
                if let Some(lane) = self.lanes.get_mut(&slot.weight) {
                    lane.unlink(slot.due, slot.seq, place);
                    if lane.live == 0 {
                        self.lanes.remove(&slot.weight);
                    }
                }
            }
        }
    }

    /// Sweeps stale tickets out of the delayed heap and of lane `weight` once they
    /// outnumber the live ones. Call after the slot that went stale was freed or renumbered.
    fn sweep(&mut self, weight: u32) {
        let live_delayed = self.delayed.len().saturating_sub(self.delayed_stale);
        if self.delayed_stale > SWEEP_MIN && self.delayed_stale > live_delayed {
            let slab = &self.slab;
            self.delayed.retain(|Reverse(ticket)| is_live(slab, ticket));
            self.delayed_stale = 0;
        }
        if let Some(lane) = self.lanes.get_mut(&weight) {
            lane.sweep(&self.slab);
        }
    }

    /// Pops the next ready job after observing `now`; see the module docs for the lane rule.
    pub(super) fn pop_due(&mut self, now: Instant) -> Option<(K, J)> {
        self.observe(now);
        let weight = self.pick_lane()?;
        let lane = self.lanes.get_mut(&weight)?;
        let index = lane.pop(&self.slab)?;
        if lane.live == 0 {
            self.lanes.remove(&weight);
        }
        self.ready_len -= 1;
        let slot = self.slab.remove(index)?;
        self.index.remove(&slot.key);
        self.counters.popped += 1;
        Some((slot.key, slot.job))
    }

    /// Chooses the lane to serve: the highest non-empty ready lane, except that each
    /// contended pop (two or more non-empty ready lanes) earns `share` credit, and a pop that
    /// brings the credit to one whole pop serves the lowest non-empty ready lane instead.
    fn pick_lane(&mut self) -> Option<u32> {
        let (&highest, _) = self.lanes.last_key_value()?;
        let (&lowest, _) = self.lanes.first_key_value()?;
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
    pub(super) fn next_delayed(&mut self) -> Option<Instant> {
        self.first_delayed().map(|ticket| ticket.due)
    }

    /// Due time of the earliest job on either side.
    pub(super) fn next_due(&mut self) -> Option<Instant> {
        let slab = &self.slab;
        let ready = self
            .lanes
            .values_mut()
            .filter_map(|lane| lane.first(slab).map(|(ticket, _)| ticket.due))
            .min();
        match (ready, self.next_delayed()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Whether a popper that just returned should wake a waiting one: there is ready work
    /// left, or delayed work with no pop holding the timer.
    pub(super) fn needs_waker(&self) -> bool {
        self.waiters > 0 && (self.ready_len > 0 || (self.timer.is_none() && self.len_delayed() > 0))
    }

    pub(super) fn contains(&self, key: &K) -> bool {
        self.index.contains_key(key)
    }

    pub(super) fn len(&self) -> usize {
        self.slab.len()
    }

    pub(super) fn len_ready(&self) -> usize {
        self.ready_len
    }

    pub(super) fn len_delayed(&self) -> usize {
        self.slab.len() - self.ready_len
    }

    /// Counts of one lane.
    pub(super) fn lane(&self, weight: u32) -> LaneStats {
        LaneStats {
            weight,
            ready: self.lanes.get(&weight).map_or(0, |lane| lane.live),
            delayed: self.delayed_per_lane.get(&weight).copied().unwrap_or(0),
        }
    }

    /// A snapshot of the counts and counters.
    pub(super) fn stats(&self) -> QueueStats {
        let mut weights: Vec<u32> = self
            .lanes
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
            delayed: self.len_delayed(),
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

    /// Tickets held by the indexes, stale ones included (for tests of the sweep).
    #[cfg(test)]
    pub(super) fn tickets(&self) -> usize {
        self.delayed.len()
            + self
                .lanes
                .values()
                .map(|lane| lane.fifo.len() + lane.early.len())
                .sum::<usize>()
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
